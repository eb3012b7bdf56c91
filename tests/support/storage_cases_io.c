/* storage_cases_io.c — shared storage scenarios about I/O paths: options,
 * injected errors, concurrent readers, O_DIRECT and its fallback (see
 * storage_testutil.h). */
#define _GNU_SOURCE

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage_testutil.h"

/* ---- options ---------------------------------------------------------------- */

/* open with these options must fail with DCP_EINVAL, the message naming
 * `mention` when given. */
static void bad_option(const stu_plugin *sp, const char *root, const char *opts,
                       const char *mention) {
  dcp_storage_config cfg = {sizeof cfg, root, DCP_STORAGE_CREATE, 0, 1, opts};
  dcp_storage *st = NULL;
  dcp_plugin_err err = {{0}};
  int rc = sp->p->open(&cfg, &st, &err);
  if (rc != DCP_EINVAL) fail_msg("options '%s': status %d, wanted DCP_EINVAL", opts, rc);
  if (mention && !strstr(err.msg, mention)) fail_msg("'%s' not in '%s'", mention, err.msg);
}

/* See storage_testutil.h. */
void stu_case_options(const stu_plugin *sp) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(NULL, parent, root);
  bad_option(sp, root, "bogus=1", "'bogus'");
  bad_option(sp, root, "direct=1,direkt=1", "'direkt'");
  const char *bad[] = {"direct=2",     "direct=",        "direct",          "=1",
                       "buffer_mib=0", "buffer_mib=1025", "buffer_mib=1x",  "buffer_mib=-1",
                       "buffer_mib= 2", "direct=1,",     ",direct=1",       "direct=1,,retries=1",
                       "retries=31",   "inject=io:eio",  "inject=disk:eio:1", "inject=io:ebad:1",
                       "buffer_mib=99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) bad_option(sp, root, bad[i], NULL);
  const char *good[] = {"direct=1,buffer_mib=2", "direct=0", "", "buffer_mib=1024",
                        "retries=0", "inject=io:eio:0", NULL};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    sp->p->close(stu_open(sp, root, DCP_STORAGE_CREATE, good[i]));
  /* options lies past a short struct_size: absent, so not parsed */
  dcp_storage_config cfg = {offsetof(dcp_storage_config, options), root, 0, 0, 1, "bogus=1"};
  dcp_storage *st = NULL;
  dcp_plugin_err err = {{0}};
  assert_int_equal(sp->p->open(&cfg, &st, &err), DCP_OK);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- injected errors -------------------------------------------------------- */

/* With an injected write error: that status from the write, again from the
 * next write (sticky) and from close. */
static void write_fails(const stu_plugin *sp, const char *options, const char *inject,
                        int expect, const char *text) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(NULL, parent, root);
  dcp_storage *st = stu_open(sp, root, DCP_STORAGE_CREATE,
                             stu_opts(options, stu_opts("direct=0", inject)));
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  char buf[100] = {0};
  assert_int_equal(sp->p->file_open(st, "w.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_write(f, buf, sizeof buf, &err), expect);
  assert_non_null(strstr(err.msg, "w.bin"));
  if (!strstr(err.msg, text)) fail_msg("'%s' not in '%s'", text, err.msg);
  assert_int_equal(sp->p->file_write(f, buf, sizeof buf, &err), expect);
  assert_int_equal(sp->p->file_sync(f, &err), expect);
  assert_int_equal(sp->p->file_close(f, &err), expect);
  assert_int_equal(stu_stats(sp, st).bytes_written, 0);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* EINTR is retried (and counted) by every plugin, at opens and transfers. */
static void eintr_retried(const stu_plugin *sp, const char *options, const char *inject,
                          uint64_t retries) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(NULL, parent, root);
  dcp_storage *st = stu_open(sp, root, DCP_STORAGE_CREATE, stu_opts(options, inject));
  tu_rng r;
  tu_rng_seed(&r, 5);
  unsigned char data[20000];
  stu_fill(&r, data, sizeof data);
  stu_write(sp, st, "e.bin", data, sizeof data, 7000, &r);
  stu_verify(sp, st, "e.bin", data, sizeof data, 5, &r);
  assert_int_equal(stu_stats(sp, st).retries, retries);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* See storage_testutil.h. */
void stu_case_inject(const stu_plugin *sp, const char *options) {
  write_fails(sp, options, "inject=io:enospc:1", DCP_ENOSPC, "No space left on device");
  write_fails(sp, options, "inject=io:edquot:1", DCP_ENOSPC, "quota");
  write_fails(sp, options, "inject=io:eio:1", DCP_EIO, "Input/output error");
  eintr_retried(sp, options, "inject=io:eintr:3", 3);
  eintr_retried(sp, options, "inject=open:eintr:2", 2);
}

/* ---- concurrent readers ----------------------------------------------------- */

enum { CR_THREADS = 8, CR_READS = 64 };

/* One reader thread's work and result (no cmocka calls off the main thread). */
typedef struct cr_job {
  const stu_plugin *sp;
  dcp_storage_file *f;
  const unsigned char *data;
  size_t len;
  uint64_t seed, bytes;
  int bad;
} cr_job;

/* Random reads, each compared with the source. */
static void *cr_run(void *arg) {
  cr_job *j = arg;
  tu_rng r;
  tu_rng_seed(&r, j->seed);
  unsigned char *buf = malloc(j->len);
  dcp_plugin_err err;
  for (int i = 0; buf && i < CR_READS; i++) {
    size_t off = (size_t)tu_rng_range(&r, 0, (int64_t)j->len - 1);
    int64_t rest = (int64_t)(j->len - off);
    size_t n = (size_t)tu_rng_range(&r, 1, rest < 200000 ? rest : 200000);
    if (j->sp->p->file_read(j->f, buf, n, off, &err) || memcmp(buf, j->data + off, n))
      j->bad++;
    j->bytes += n;
  }
  if (!buf) j->bad++;
  free(buf);
  return NULL;
}

/* Start the readers on one shared handle and wait for them. */
static uint64_t cr_threads(const stu_plugin *sp, dcp_storage_file *f, const unsigned char *data,
                           size_t len) {
  pthread_t t[CR_THREADS];
  cr_job jobs[CR_THREADS];
  uint64_t bytes = 0;
  for (int i = 0; i < CR_THREADS; i++) {
    jobs[i] = (cr_job){sp, f, data, len, 1000u + (uint64_t)i, 0, 0};
    assert_int_equal(pthread_create(&t[i], NULL, cr_run, &jobs[i]), 0);
  }
  for (int i = 0; i < CR_THREADS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(jobs[i].bad, 0);
    bytes += jobs[i].bytes;
  }
  return bytes;
}

/* See storage_testutil.h. */
void stu_case_concurrent_reads(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(NULL, parent, root);
  dcp_storage *st = stu_open(sp, root, DCP_STORAGE_CREATE, options);
  tu_rng r;
  tu_rng_seed(&r, 99);
  size_t len = (2u << 20) + 12345;
  unsigned char *data = malloc(len);
  assert_non_null(data);
  stu_fill(&r, data, len);
  stu_write(sp, st, "c.bin", data, len, 1u << 20, &r);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_open(st, "c.bin", DCP_FILE_READ, &f, &err), DCP_OK);
  uint64_t bytes = cr_threads(sp, f, data, len);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  dcp_io_stats s = stu_stats(sp, st);
  assert_int_equal(s.read_ops, CR_THREADS * CR_READS);
  assert_int_equal(s.bytes_read, bytes);
  free(data);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- O_DIRECT --------------------------------------------------------------- */

/* A small file written and read with the fds' O_DIRECT state checked at
 * each step (the tail write clears it; it must come back). */
static void direct_probe(const stu_plugin *sp, dcp_storage *st, int expect) {
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  unsigned char data[5000], back[4990];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 31u);
  assert_int_equal(sp->p->file_open(st, "p.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->diag->file_is_direct(f), expect);
  assert_int_equal(sp->p->file_write(f, data, 3000, &err), DCP_OK);
  assert_int_equal(sp->p->file_sync(f, &err), DCP_OK); /* 3000-byte tail, buffered */
  assert_int_equal(sp->diag->file_is_direct(f), expect);
  assert_int_equal(sp->p->file_write(f, data + 3000, 2000, &err), DCP_OK);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK); /* 4096 direct + 904 tail */
  assert_int_equal(sp->p->file_open(st, "p.bin", DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp->diag->file_is_direct(f), expect);
  assert_int_equal(sp->p->file_read(f, back, sizeof back, 3, &err), DCP_OK);
  assert_memory_equal(back, data + 3, sizeof back);
  assert_int_equal(sp->p->file_read(f, back, 4096, 0, &err), DCP_OK); /* aligned fast path? */
  assert_memory_equal(back, data, 4096);
  assert_int_equal(sp->p->file_read(f, back, 905, 4096, &err), DCP_ECORRUPT);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
}

/* See storage_testutil.h. Sizes straddle the 1 MiB staging buffer and the
 * 4096-byte blocks; pieces are uneven. */
void stu_case_direct(const stu_plugin *sp, uint32_t flags, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(NULL, parent, root);
  int expect = stu_direct_supported(parent);
  if (!expect) print_message("O_DIRECT unsupported in %s: testing the fallback\n", parent);
  dcp_storage *st = stu_open(sp, root, DCP_STORAGE_CREATE | flags,
                             stu_opts(options, "buffer_mib=1"));
  direct_probe(sp, st, expect);
  tu_rng r;
  tu_rng_seed(&r, tu_seed(4242));
  const size_t sizes[] = {1, 4095, 4097, 3 * 4096 + 17, (1u << 20) + 1, (5u << 20) + 4095};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *data = malloc(sizes[i]);
    assert_non_null(data);
    stu_fill(&r, data, sizes[i]);
    stu_write(sp, st, "d.bin", data, sizes[i], sizes[i] / 5 + 777, &r);
    stu_verify(sp, st, "d.bin", data, sizes[i], 60, &r);
    free(data);
  }
  uint64_t fallbacks = sp->diag->direct_fallbacks(st);
  if (expect) assert_int_equal(fallbacks, 0);
  else assert_true(fallbacks > 0);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* Write and verify 1 MiB + 3 bytes with these options in base; returns
 * the fallback count and whether the write fd ended up direct. */
static uint64_t fallback_run(const stu_plugin *sp, const char *base, const char *options,
                             int *write_direct) {
  char parent[STU_PATH], root[STU_PATH];
  stu_scratch(base, parent, root);
  dcp_storage *st = stu_open(sp, root, DCP_STORAGE_CREATE, options);
  tu_rng r;
  tu_rng_seed(&r, 17);
  size_t len = (3u << 20) + 3;
  unsigned char *data = malloc(len);
  assert_non_null(data);
  stu_fill(&r, data, len);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_open(st, "fb.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_write(f, data, len, &err), DCP_OK);
  *write_direct = sp->diag->file_is_direct(f);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  stu_verify(sp, st, "fb.bin", data, len, 30, &r);
  uint64_t n = sp->diag->direct_fallbacks(st);
  free(data);
  sp->p->close(st);
  stu_rmrf(parent);
  return n;
}

/* See storage_testutil.h. */
void stu_case_direct_fallback(const stu_plugin *sp) {
  char probe[STU_PATH];
  int wd;
  stu_tmpdir(NULL, probe, sizeof probe);
  int supported = stu_direct_supported(probe);
  stu_rmrf(probe);
  /* refused at open (as tmpfs did before Linux 6.6): buffered from the
   * start; the read open falls back too where the disk refuses for real */
  assert_int_equal(fallback_run(sp, NULL, "direct=1,inject=open:einval:1", &wd),
                   supported ? 1 : 2);
  assert_int_equal(wd, 0);
  if (supported) { /* refused at the first block write: drop O_DIRECT mid-file */
    assert_int_equal(fallback_run(sp, NULL, "direct=1,buffer_mib=1,inject=io:einval:1", &wd), 1);
    assert_int_equal(wd, 0);
  }
  struct stat sb;
  if (stat("/dev/shm", &sb) == 0 && access("/dev/shm", W_OK) == 0) {
    stu_tmpdir("/dev/shm", probe, sizeof probe);
    int shm_direct = stu_direct_supported(probe);
    stu_rmrf(probe);
    uint64_t n = fallback_run(sp, "/dev/shm", "direct=1", &wd);
    assert_int_equal(wd, shm_direct);
    if (!shm_direct) assert_true(n > 0); /* a real file system refusing O_DIRECT */
    else print_message("/dev/shm accepts O_DIRECT: real fallback not exercised\n");
  }
}

/* ---- early writeback ---------------------------------------------------------- */

#define WB_STEP ((uint64_t)32 << 20) /* fsio_file.c's WRITEBACK_STEP */

/* See storage_testutil.h. 80 MiB and a bit in uneven appends: after each,
 * the writeback started covers every whole 32 MiB step written and nothing
 * beyond, and the file reads back as written. */
void stu_case_writeback(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  tu_rng r;
  tu_rng_seed(&r, tu_seed(3232));
  size_t len = (80u << 20) + 12345;
  unsigned char *data = malloc(len);
  assert_non_null(data);
  stu_fill(&r, data, len);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_open(st, "wb.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->diag->file_is_direct(f), 0);
  int refused = 0;
  for (size_t at = 0; at < len;) {
    size_t n = (size_t)tu_rng_range(&r, 1, 9 << 20);
    if (n > len - at) n = len - at;
    assert_int_equal(sp->p->file_write(f, data + at, n, &err), DCP_OK);
    at += n;
    uint64_t started = sp->diag->writeback_started(f), want = at / WB_STEP * WB_STEP;
    if (want && !started && !refused) {
      refused = 1;
      print_message("sync_file_range refused in %s: no early writeback to check\n", root);
    }
    if (!refused) assert_int_equal(started, want);
  }
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  stu_verify(sp, st, "wb.bin", data, len, 20, &r);
  free(data);
  sp->p->close(st);
  stu_rmrf(parent);
}
