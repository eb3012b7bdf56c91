/* Links against an installed libdcp and checks header and library agree. */
#include <dcp.h>
#include <stdio.h>

int main(void) {
  if (dcp_version_number() != DCP_VERSION_NUMBER) {
    fprintf(stderr, "header %d, library %u\n", DCP_VERSION_NUMBER, dcp_version_number());
    return 1;
  }
  dcp_ctx *ctx;
  if (dcp_ctx_create(NULL, &ctx) != DCP_OK) return 1;
  dcp_box a = {.ndim = 1, .offset = {0}, .size = {4}}, b = {.ndim = 1, .offset = {2}, .size = {4}}, c;
  int hit = dcp_box_intersect(&a, &b, &c);
  dcp_ctx_free(ctx);
  printf("libdcp %s linked from the install prefix (intersection %d: [%lld, %lld))\n",
         dcp_version_string(), hit, (long long)c.offset[0], (long long)(c.offset[0] + c.size[0]));
  return hit == 1 && c.offset[0] == 2 && c.size[0] == 2 ? 0 : 1;
}
