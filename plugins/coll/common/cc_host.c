/* cc_host.c — this host's id (cc_host.h). */
#define _POSIX_C_SOURCE 200809L
#include "cc_host.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
  return h;
}

/* The first line of the kernel's boot id into buf ("" when unreadable). */
static void boot_id(char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  if (!fgets(buf, (int)cap, f)) buf[0] = '\0';
  fclose(f);
}

uint64_t dcpi_cc_host_id(void) {
  uint64_t h = FNV_OFFSET;
  char name[256] = "";
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  name[sizeof name - 1] = '\0';
  h = mix(h, name, strlen(name) + 1); /* the NUL ends the name */
  char boot[64];
  boot_id(boot, sizeof boot);
  h = mix(h, boot, strlen(boot));
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    h = mix(h, &st.st_dev, sizeof st.st_dev);
    h = mix(h, &st.st_ino, sizeof st.st_ino);
  }
  return h ? h : 1;
}
