/* test_writer_proto.c — the async writer protocol: job and DONE payloads
 * round-trip; truncated or altered payloads and headers are refused with
 * DCP_ECORRUPT / DCP_EVERSION, never read out of bounds; frames cross a
 * socketpair with a passed descriptor. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "model/layout.h"
#include "testutil.h"
#include "writer/proto.h"

static dcpi_wp_tensor tensors[2] = {{"a.weight", DCP_F32, 2, {4, 8}, NULL, 0, 0},
                                     {"b", DCP_I64, 0, {0}, NULL, 0, 0}};
static dcpi_wp_chunk chunks[2] = {{0, {2, {0, 0}, {4, 8}}, 0, 128}, {1, {0, {0}, {0}}, 128, 8}};
static dcpi_wp_bytes bytes[1] = {{"rng", DCP_SCOPE_PER_RANK, 192, 5}};
static char *keys[1] = {"step"}, *values[1] = {"7"};

static void sample(dcpi_wp_job *j) {
  memset(j, 0, sizeof *j);
  j->seq = 3, j->path = "/ckpt/x", j->flags = 1, j->block_size = 4096, j->zstd_level = -2;
  j->nkv = 1, j->kv_keys = keys, j->kv_values = values;
  j->coord = (dcpi_wp_coord){"file", "job=w", "/rdv", 1, 2, 5000, 700, NULL, "k=v", "/p"};
  j->save_id = 42;
  j->pool_size = 4096;
  j->ntensors = 2, j->tensors = tensors, j->nchunks = 2, j->chunks = chunks;
  j->nbytes = 1, j->bytes = bytes;
}

static void test_job_roundtrip(void **state) {
  (void)state;
  dcpi_wp_job j, d;
  sample(&j);
  uint8_t *p;
  size_t len;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  dcpi_err err;
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_OK);
  assert_int_equal(d.seq, 3);
  assert_string_equal(d.path, "/ckpt/x");
  assert_int_equal(d.zstd_level, -2);
  assert_string_equal(d.kv_keys[0], "step");
  assert_string_equal(d.coord.coll, "file");
  assert_null(d.coord.storage);
  assert_int_equal(d.coord.rank, 1);
  assert_int_equal(d.ntensors, 2);
  assert_string_equal(d.tensors[0].fqn, "a.weight");
  assert_int_equal(d.tensors[0].shape[1], 8);
  assert_int_equal(d.chunks[0].box.size[1], 8);
  assert_int_equal(d.chunks[1].offset, 128);
  assert_string_equal(d.bytes[0].key, "rng");
  assert_int_equal(d.bytes[0].len, 5);
  assert_int_equal(d.refused, 0);
  assert_null(d.refused_msg);
  dcpi_wp_job_free(&d);
  /* the same job refused after the fact: everything else unchanged; a
   * payload already refused cannot be refused again */
  uint8_t *r = malloc(len);
  size_t rlen = len;
  memcpy(r, p, len);
  assert_int_equal(dcpi_wp_job_refuse(&r, &rlen, DCP_EIO, "copy failed"), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(r, rlen, &d, &err), DCP_OK);
  assert_int_equal(d.refused, DCP_EIO);
  assert_string_equal(d.refused_msg, "copy failed");
  assert_string_equal(d.path, "/ckpt/x");
  assert_int_equal(d.chunks[1].offset, 128);
  dcpi_wp_job_free(&d);
  assert_int_equal(dcpi_wp_job_refuse(&r, &rlen, DCP_EIO, "again"), DCP_EINVAL);
  free(r);
  /* every truncation fails cleanly */
  for (size_t n = 0; n < len; n++) {
    assert_int_equal(dcpi_wp_job_decode(p, n, &d, &err), DCP_ECORRUPT);
    dcpi_wp_job_free(&d);
  }
  /* every single-byte change decodes or fails cleanly */
  for (size_t i = 0; i < len; i++) {
    uint8_t *q = malloc(len);
    memcpy(q, p, len);
    q[i] ^= 0xA5;
    dcp_status rc = dcpi_wp_job_decode(q, len, &d, &err);
    assert_true(rc == DCP_OK || rc == DCP_ECORRUPT);
    dcpi_wp_job_free(&d);
    free(q);
  }
  free(p);
}

static void test_ranges_checked(void **state) {
  (void)state;
  dcpi_wp_job j, d;
  sample(&j);
  j.pool_size = 100; /* chunk 0 ends at 128 */
  uint8_t *p;
  size_t len;
  dcpi_err err;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_ECORRUPT);
  dcpi_wp_job_free(&d);
  free(p);
  sample(&j);
  dcpi_wp_chunk bad = chunks[0];
  bad.tensor = 2;
  j.chunks = &bad, j.nchunks = 1;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_ECORRUPT);
  dcpi_wp_job_free(&d);
  free(p);
}

/* A layout travels with its tensor and is rebuilt (and validated) on the
 * writer's side. */
static void test_layout_roundtrip(void **state) {
  (void)state;
  int64_t mesh[2] = {2, 2};
  int32_t ranks[4] = {3, 1, 2, 0};
  uint32_t map[2] = {1u << 1, 0};
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(NULL, 2, mesh, ranks, 2, map, &l), DCP_OK);
  dcpi_wp_tensor t[2] = {tensors[0], tensors[1]};
  t[0].layout = l;
  dcpi_wp_job j, d;
  sample(&j);
  j.tensors = t;
  uint8_t *p;
  size_t len;
  dcpi_err err;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_OK);
  assert_non_null(d.tensors[0].layout);
  assert_null(d.tensors[1].layout);
  const dcp_layout *g = d.tensors[0].layout;
  assert_int_equal(g->mesh_ndim, 2);
  assert_int_equal(g->nranks, 4);
  assert_memory_equal(g->ranks, ranks, sizeof ranks);
  assert_int_equal(g->tensor_map[0], 1u << 1);
  assert_int_equal(d.tensors[0].flat, 0);
  dcpi_wp_job_free(&d);
  free(p);
  /* a flat-sharded tensor's layout keeps its flat dims */
  t[0].flat = 1, t[0].flat_dims = 1;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_OK);
  assert_int_equal(d.tensors[0].flat, 1);
  assert_int_equal(d.tensors[0].flat_dims, 1);
  assert_non_null(d.tensors[0].layout);
  dcpi_wp_job_free(&d);
  free(p);
  t[0].flat = 0, t[0].flat_dims = 0;
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  for (size_t n = 0; n < len; n++) { /* every truncation fails cleanly */
    assert_int_equal(dcpi_wp_job_decode(p, n, &d, &err), DCP_ECORRUPT);
    dcpi_wp_job_free(&d);
  }
  free(p);
  /* a layout the builder refuses (a rank twice) is a corrupt job */
  l->ranks[1] = l->ranks[0];
  assert_int_equal(dcpi_wp_job_encode(&j, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_job_decode(p, len, &d, &err), DCP_ECORRUPT);
  assert_non_null(strstr(err.msg, "layout of 'a.weight'"));
  dcpi_wp_job_free(&d);
  free(p);
  l->ranks[1] = 1;
  dcp_layout_free(l);
}

static void test_done_and_header(void **state) {
  (void)state;
  uint8_t *p, hdr[DCPI_WP_HEADER];
  size_t len;
  uint64_t seq;
  dcp_status rc;
  char msg[64];
  dcpi_err err;
  dcp_stats sent = {.struct_size = sizeof sent, .plan_s = 0.25, .total_s = 1.5,
                    .bytes_written = 123456789, .coll_bytes = 40, .items_written = 7,
                    .plan_cache_hit = 1, .plan_coll_bytes = 40};
  dcp_stats got;
  assert_int_equal(dcpi_wp_done_encode(9, DCP_EIO, "disk on fire", &sent, &p, &len), DCP_OK);
  assert_int_equal(dcpi_wp_done_decode(p, len, &seq, &rc, msg, sizeof msg, &got, &err), DCP_OK);
  assert_int_equal(seq, 9);
  assert_int_equal(rc, DCP_EIO);
  assert_string_equal(msg, "disk on fire");
  assert_true(got.plan_s == 0.25 && got.total_s == 1.5);
  assert_int_equal(got.bytes_written, 123456789);
  assert_int_equal(got.items_written, 7);
  assert_int_equal(got.plan_cache_hit, 1);
  assert_int_equal(got.plan_coll_bytes, 40);
  for (size_t cut = 0; cut < len; cut++) /* every truncation is refused */
    assert_int_equal(dcpi_wp_done_decode(p, cut, &seq, &rc, msg, sizeof msg, &got, &err),
                     DCP_ECORRUPT);
  dcpi_wp_header(hdr, DCPI_WP_DONE, p, len);
  uint16_t type;
  uint64_t n;
  assert_int_equal(dcpi_wp_check_header(hdr, &type, &n, &err), DCP_OK);
  assert_int_equal(n, len);
  assert_int_equal(dcpi_wp_check_payload(hdr, p, len, &err), DCP_OK);
  p[0] ^= 1;
  assert_int_equal(dcpi_wp_check_payload(hdr, p, len, &err), DCP_ECORRUPT);
  hdr[4] = 9; /* version */
  assert_int_equal(dcpi_wp_check_header(hdr, &type, &n, &err), DCP_EVERSION);
  hdr[4] = DCPI_WP_VERSION & 0xff, hdr[0] ^= 1; /* magic */
  assert_int_equal(dcpi_wp_check_header(hdr, &type, &n, &err), DCP_ECORRUPT);
  hdr[0] ^= 1, hdr[6] = 77; /* type */
  assert_int_equal(dcpi_wp_check_header(hdr, &type, &n, &err), DCP_ECORRUPT);
  free(p);
}

static void test_socket_frames(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int passed[2];
  assert_int_equal(pipe(passed), 0);
  dcpi_err err;
  const uint8_t payload[5] = {1, 2, 3, 4, 5};
  assert_int_equal(dcpi_wp_send(sv[0], DCPI_WP_SAVE, payload, 5, passed[1], &err), DCP_OK);
  uint16_t type;
  uint8_t *p;
  size_t len;
  int fd;
  assert_int_equal(dcpi_wp_recv(sv[1], &type, &p, &len, &fd, &err), DCP_OK);
  assert_int_equal(type, DCPI_WP_SAVE);
  assert_int_equal(len, 5);
  assert_memory_equal(p, payload, 5);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "x", 1), 1); /* the passed pipe end works */
  char c;
  assert_int_equal(read(passed[0], &c, 1), 1);
  free(p);
  close(fd), close(passed[0]), close(passed[1]);
  /* a torn frame, then a clean end */
  uint8_t hdr[DCPI_WP_HEADER];
  dcpi_wp_header(hdr, DCPI_WP_DONE, payload, 5);
  assert_int_equal(write(sv[0], hdr, sizeof hdr), (ssize_t)sizeof hdr);
  close(sv[0]);
  assert_int_equal(dcpi_wp_recv(sv[1], &type, &p, &len, NULL, &err), DCP_EPEER);
  assert_int_equal(dcpi_wp_recv(sv[1], &type, &p, &len, NULL, &err), DCP_ENOTFOUND);
  close(sv[1]);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_job_roundtrip),
      cmocka_unit_test(test_ranges_checked),
      cmocka_unit_test(test_layout_roundtrip),
      cmocka_unit_test(test_done_and_header),
      cmocka_unit_test(test_socket_frames),
  };
  return TU_RUN(tests, NULL, NULL);
}
