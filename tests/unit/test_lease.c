/* The directory lease (src/runtime/lease.c) with real processes: a second
 * holder gets DCP_EBUSY naming the first, a SIGKILLed holder of this host
 * is seen dead and its lease taken at once, one of another host (or an
 * older libdcp) after ttl + grace and not before, empty and garbage lease files are
 * broken after the delay (and a file filled in meanwhile is respected), a
 * SIGSTOPped holder resumed past its expiry fails its check (whether or not
 * someone took over) and never clobbers the new holder, eight processes
 * racing to break and take the lease never hold it at once, release removes
 * the file, a planted symlink is not followed, and a plugin without
 * DCP_STORAGE_CAP_EXCL gets an unenforced lease. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/plugin.h"
#include "runtime/lease.h"
#include "runtime/rt.h"

#define PATHCAP 4096

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A context on `storage` (posix or sharedfs) and a fresh directory. */
typedef struct fixture {
  dcp_ctx *ctx;
  char dir[PATHCAP], plugins[PATHCAP], lock[PATHCAP + 16];
} fixture;

static void fx_open(fixture *fx, const char *storage, const char *options) {
  dcp_ctx *tmp = tu_scratch_ctx("lease", fx->dir, sizeof fx->dir, fx->plugins,
                                sizeof fx->plugins);
  dcp_ctx_free(tmp);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = storage;
  cfg.storage_options = options;
  cfg.plugin_path = fx->plugins;
  assert_int_equal(dcp_ctx_create(&cfg, &fx->ctx), DCP_OK);
  snprintf(fx->lock, sizeof fx->lock, "%s/.lock", fx->dir);
}

static void fx_close(fixture *fx) {
  dcp_ctx_free(fx->ctx);
  tu_remove_tree(fx->dir);
}

/* An operation on the fixture's directory with its storage open. */
static void rt_open(fixture *fx, dcpi_rt *rt) {
  dcpi_rt_begin(rt, fx->ctx, fx->dir);
  assert_int_equal(dcpi_rt_open_storage(rt, DCP_STORAGE_CREATE), DCP_OK);
}

static int count_cb(void *arg, const char *name) {
  (void)name;
  ++*(int *)arg;
  return 0;
}

/* The record in the posix lease file, or false. */
static bool read_record(const char *path, dcpi_lease_record *r) {
  char buf[DCPI_LEASE_RECORD_MAX + 1];
  int fd = open(path, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n > 0 && dcpi_lease_record_parse(buf, (size_t)n, r);
}

/* Write bytes to path through a temporary and a rename (atomic). */
static void put_file(const char *path, const char *data, size_t len) {
  char tmp[PATHCAP + 32];
  snprintf(tmp, sizeof tmp, "%s.planting", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
  assert_int_equal(rename(tmp, path), 0);
}

/* Plant a record of a foreign holder (pid, nonce byte) expiring at exp. */
static void plant_record(const char *path, int64_t pid, uint8_t nb, int64_t exp) {
  dcpi_lease_record r;
  memset(&r, 0, sizeof r);
  memset(r.nonce, nb, sizeof r.nonce);
  snprintf(r.host, sizeof r.host, "elsewhere");
  r.pid = pid;
  r.expires_ms = exp;
  r.ttl_ms = 1000;
  r.grace_ms = 100;
  char buf[DCPI_LEASE_RECORD_MAX + 1];
  size_t n = dcpi_lease_record_format(&r, buf, sizeof buf);
  assert_true(n > 0);
  put_file(path, buf, n);
}

/* ---- a holder process, driven through pipes ------------------------------ */

typedef struct reply {
  int status;
  char msg[DCPI_ERR_MSG_MAX];
} reply;

typedef struct holder {
  pid_t pid;
  int cmd; /* parent → child */
  int rep; /* child → parent */
} holder;

static void send_reply(int fd, dcp_status rc, const dcpi_err *e) {
  reply r;
  memset(&r, 0, sizeof r);
  r.status = rc;
  if (rc && e) snprintf(r.msg, sizeof r.msg, "%s", e->msg);
  if (write(fd, &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
}

static reply get_reply(const holder *h) {
  reply r;
  ssize_t n = read(h->rep, &r, sizeof r);
  assert_int_equal(n, (ssize_t)sizeof r);
  return r;
}

/* Fork a process that takes the lease `name` with ttl_ms and reports the
 * result; then it obeys one-byte commands: 'c' check (replies), 'r'
 * release (replies), 'q' exit. The acquire's reply is returned. */
static reply holder_start(fixture *fx, const char *name, int64_t ttl_ms, holder *h) {
  int c[2], p[2];
  assert_int_equal(pipe(c), 0);
  assert_int_equal(pipe(p), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(c[1]);
    close(p[0]);
    dcpi_rt rt;
    dcpi_rt_begin(&rt, fx->ctx, fx->dir);
    if (dcpi_rt_open_storage(&rt, DCP_STORAGE_CREATE)) _exit(2);
    dcpi_lease *l = NULL;
    dcpi_err e;
    dcpi_err_clear(&e);
    send_reply(p[1], dcpi_lease_acquire(&rt, name, ttl_ms, &l, &e), &e);
    for (;;) {
      char cmd;
      if (read(c[0], &cmd, 1) != 1 || cmd == 'q') _exit(0);
      dcpi_err_clear(&e);
      if (cmd == 'c') send_reply(p[1], dcpi_lease_check(l, &e), &e);
      if (cmd == 'r') {
        dcpi_lease_release(l);
        l = NULL;
        send_reply(p[1], DCP_OK, NULL);
      }
    }
  }
  close(c[0]);
  close(p[1]);
  h->pid = pid, h->cmd = c[1], h->rep = p[0];
  return get_reply(h);
}

static reply holder_cmd(const holder *h, char cmd) {
  assert_int_equal(write(h->cmd, &cmd, 1), 1);
  return get_reply(h);
}

/* Tell it to exit (or kill it) and reap it. */
static void holder_end(holder *h, int sig) {
  if (sig) kill(h->pid, sig);
  char q = 'q';
  if (!sig) assert_int_equal(write(h->cmd, &q, 1), 1);
  int st;
  assert_int_equal(waitpid(h->pid, &st, 0), h->pid);
  if (!sig) assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(h->cmd);
  close(h->rep);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_record_format(void **state) {
  (void)state;
  dcpi_lease_record r, q;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < 16; i++) r.nonce[i] = (uint8_t)(i * 17);
  snprintf(r.host, sizeof r.host, "node-01.cluster");
  r.pid = 4242, r.expires_ms = 1700000000123, r.ttl_ms = 30000, r.grace_ms = 2000;
  r.renewals = 7;
  char buf[DCPI_LEASE_RECORD_MAX + 1];
  size_t n = dcpi_lease_record_format(&r, buf, sizeof buf);
  assert_true(n > 0 && buf[n - 1] == '\n');
  assert_true(dcpi_lease_record_parse(buf, n, &q));
  assert_memory_equal(&r, &q, sizeof r);
  /* strict: no prefix, missing newline, trailing bytes, non-canonical numbers */
  assert_false(dcpi_lease_record_parse(buf, n - 1, &q));
  assert_false(dcpi_lease_record_parse(buf + 1, n - 1, &q));
  char longer[DCPI_LEASE_RECORD_MAX + 8];
  memcpy(longer, buf, n);
  memcpy(longer + n, "x", 1);
  assert_false(dcpi_lease_record_parse(longer, n + 1, &q));
  char *pid = strstr(buf, "pid=4242");
  assert_non_null(pid);
  char alt[DCPI_LEASE_RECORD_MAX + 8];
  size_t at = (size_t)(pid - buf) + 4;
  memcpy(alt, buf, at);
  alt[at] = '0';
  memcpy(alt + at + 1, buf + at, n - at);
  assert_false(dcpi_lease_record_parse(alt, n + 1, &q)); /* pid=04242 */
  assert_false(dcpi_lease_record_parse("", 0, &q));
  assert_false(dcpi_lease_record_parse("dcp-lease 1 \n", 13, &q));
}

static void test_bad_arguments(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  dcpi_rt rt;
  dcpi_rt_begin(&rt, fx.ctx, fx.dir);
  dcpi_lease *l = (dcpi_lease *)&rt;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_EINVAL); /* not open */
  assert_null(l);
  assert_int_equal(dcpi_rt_open_storage(&rt, DCP_STORAGE_CREATE), DCP_OK);
  assert_int_equal(dcpi_lease_acquire(&rt, "a/b", 300, &l, &e), DCP_EINVAL);
  assert_int_equal(dcpi_lease_acquire(&rt, "..", 300, &l, &e), DCP_EINVAL);
  assert_int_equal(dcpi_lease_acquire(&rt, "", 300, &l, &e), DCP_EINVAL);
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 10, &l, &e), DCP_EINVAL);
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", -1, &l, &e), DCP_EINVAL);
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 0, &l, &e), DCP_OK); /* default ttl */
  dcpi_lease_record r;
  assert_true(read_record(fx.lock, &r));
  assert_int_equal(r.ttl_ms, DCPI_LEASE_TTL_DEFAULT_MS);
  assert_int_equal(r.grace_ms, DCPI_LEASE_GRACE_MAX_MS);
  assert_int_equal(r.pid, getpid());
  assert_true(dcpi_lease_enforced(l));
  dcpi_lease_release(l);
  dcpi_lease_release(NULL);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* Another live holder: DCP_EBUSY naming it (host, pid, expiry), in another
 * process and in this one; after its release the lease is free again. */
static void busy_case(const char *storage, const char *options) {
  fixture fx;
  fx_open(&fx, storage, options);
  holder h;
  reply r = holder_start(&fx, ".lock", 2000, &h);
  assert_int_equal(r.status, DCP_OK);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 2000, &l, &e), DCP_EBUSY);
  assert_null(l);
  char want[64];
  snprintf(want, sizeof want, "pid %d,", (int)h.pid);
  if (!strstr(e.msg, want) || !strstr(e.msg, "host ") || !strstr(e.msg, "expires in") ||
      !strstr(e.msg, fx.dir))
    fail_msg("EBUSY message lacks the holder: %s", e.msg);
  assert_int_equal(holder_cmd(&h, 'c').status, DCP_OK); /* unaffected */
  assert_int_equal(holder_cmd(&h, 'r').status, DCP_OK);
  holder_end(&h, 0);
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 2000, &l, &e), DCP_OK);
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  /* a second acquisition in this very process is just as busy */
  dcpi_lease *l2 = NULL;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 2000, &l2, &e), DCP_EBUSY);
  snprintf(want, sizeof want, "pid %d,", (int)getpid());
  assert_non_null(strstr(e.msg, want));
  /* other names are other leases */
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock.3", 2000, &l2, &e), DCP_OK);
  dcpi_lease_release(l2);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

static void test_busy_posix(void **state) {
  (void)state;
  busy_case("posix", NULL);
}

static void test_busy_sharedfs(void **state) {
  (void)state;
  busy_case("sharedfs", NULL);
}

/* Release removes the file and leaves nothing behind; the next acquire
 * is immediate. */
static void release_case(const char *storage) {
  fixture fx;
  fx_open(&fx, storage, NULL);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
  sleep_ms(250); /* a couple of renewals (every 100 ms) */
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  if (strcmp(storage, "posix") == 0) {
    dcpi_lease_record r;
    assert_true(read_record(fx.lock, &r));
    assert_int_equal(r.pid, getpid());
    assert_true(r.renewals >= 1);
    assert_true(r.expires_ms > dcpi_lease_wall_ms());
  }
  dcpi_lease_release(l);
  int count = 0;
  assert_int_equal(dcpi_rt_list(&rt, count_cb, &count, &e), DCP_OK);
  assert_int_equal(count, 0); /* no lease file, no temporaries */
  int64_t t0 = mono_ms();
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
  assert_true(mono_ms() - t0 < 200);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  struct stat sb;
  if (strcmp(storage, "posix") == 0) assert_int_equal(lstat(fx.lock, &sb), -1);
  fx_close(&fx);
}

static void test_release_removes_posix(void **state) {
  (void)state;
  release_case("posix");
}

static void test_release_removes_sharedfs(void **state) {
  (void)state;
  release_case("sharedfs");
}

/* Rewrite the lease file at path with record r. */
static void write_record(const char *path, const dcpi_lease_record *r) {
  char buf[DCPI_LEASE_RECORD_MAX + 1];
  size_t n = dcpi_lease_record_format(r, buf, sizeof buf);
  assert_true(n > 0);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  fclose(f);
}

/* A SIGKILLed holder of this host (same boot, same pid namespace) is seen
 * dead: its lease is taken at once, long before its expiry. */
static void test_killed_holder(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  holder h;
  assert_int_equal(holder_start(&fx, ".lock", 3000, &h).status, DCP_OK);
  sleep_ms(50);
  holder_end(&h, SIGKILL);
  dcpi_lease_record r;
  assert_true(read_record(fx.lock, &r));
  assert_int_equal(r.pid, h.pid);
  assert_int_equal(strlen(r.boot), 32); /* this machine has a boot id */
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 3000, &l, &e), DCP_OK);
  assert_true(dcpi_lease_wall_ms() < r.expires_ms); /* well before its expiry */
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  dcpi_lease_record now;
  assert_true(read_record(fx.lock, &now));
  assert_int_equal(now.pid, getpid());
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* A record of this very process that no lease of it holds (a release whose
 * removal failed, e.g. under an I/O error) is a leftover: taken at once,
 * long before its expiry. One it does hold stays busy. */
static void test_own_leftover(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL, *again = NULL;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 5000, &l, &e), DCP_OK);
  dcpi_lease_record r;
  assert_true(read_record(fx.lock, &r));
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 5000, &again, &e), DCP_EBUSY);
  dcpi_lease_release(l);
  r.nonce[0] ^= 0x5a; /* not an acquisition this process holds */
  r.expires_ms = dcpi_lease_wall_ms() + 60000;
  write_record(fx.lock, &r);
  int64_t t0 = dcpi_lease_wall_ms();
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 5000, &l, &e), DCP_OK);
  assert_true(dcpi_lease_wall_ms() - t0 < 5000);
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* A dead holder this process cannot see (its record names another host,
 * or no boot id): its lease is taken once the record's expiry + grace has
 * passed, and not before (every earlier attempt is EBUSY). */
static void test_dead_holder_elsewhere(void **state) {
  (void)state;
  for (int variant = 0; variant < 2; variant++) {
    fixture fx;
    fx_open(&fx, "posix", NULL);
    holder h;
    assert_int_equal(holder_start(&fx, ".lock", 300, &h).status, DCP_OK);
    sleep_ms(120);
    holder_end(&h, SIGKILL);
    dcpi_lease_record r;
    assert_true(read_record(fx.lock, &r));
    if (variant == 0) snprintf(r.host, sizeof r.host, "another-node");
    else r.boot[0] = '\0', r.pidns = 0; /* a holder of an older libdcp */
    write_record(fx.lock, &r);
    int64_t free_at = r.expires_ms + r.grace_ms;
    dcpi_rt rt;
    rt_open(&fx, &rt);
    dcpi_lease *l = NULL;
    dcpi_err e;
    int busy = 0;
    dcp_status rc;
    for (;;) {
      rc = dcpi_lease_acquire(&rt, ".lock", 300, &l, &e);
      if (rc != DCP_EBUSY) break;
      busy++;
      char want[64];
      snprintf(want, sizeof want, "pid %d,", (int)h.pid);
      assert_non_null(strstr(e.msg, want));
      assert_true(dcpi_lease_wall_ms() < free_at + 5000); /* never kept forever */
      sleep_ms(10);
    }
    int64_t got = dcpi_lease_wall_ms();
    assert_int_equal(rc, DCP_OK);
    assert_true(busy > 5);
    if (got <= free_at) fail_msg("taken %" PRId64 " ms before expiry + grace", free_at - got);
    assert_true(got < free_at + 2000);
    assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
    dcpi_lease_release(l);
    dcpi_rt_end(&rt);
    fx_close(&fx);
  }
}

/* An empty or unparsable lease file (a holder that died between create
 * and write) is broken after the delay; one that gets a live record
 * meanwhile is respected. */
static void test_empty_and_garbage(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  const char *contents[] = {"", "hello\n", "dcp-lease 1 nonce=00"};
  for (int i = 0; i < 3; i++) {
    put_file(fx.lock, contents[i], strlen(contents[i]));
    int64_t t0 = mono_ms();
    assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
    assert_true(mono_ms() - t0 >= 60); /* re-read after 2 * step (30 ms) */
    dcpi_lease_record r;
    assert_true(read_record(fx.lock, &r));
    assert_int_equal(r.pid, getpid());
    dcpi_lease_release(l);
  }
  /* empty, then filled in with a live record while the acquirer waits
   * (ttl 2 s: it re-reads after 400 ms) */
  put_file(fx.lock, "", 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    sleep_ms(100);
    dcpi_lease_record r;
    memset(&r, 0, sizeof r);
    memset(r.nonce, 0x5a, 16);
    snprintf(r.host, sizeof r.host, "writer");
    r.pid = 777, r.expires_ms = dcpi_lease_wall_ms() + 10000, r.ttl_ms = 10000;
    char buf[DCPI_LEASE_RECORD_MAX + 1];
    size_t n = dcpi_lease_record_format(&r, buf, sizeof buf);
    char tmp[PATHCAP + 32];
    snprintf(tmp, sizeof tmp, "%s.fill", fx.lock);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0 || write(fd, buf, n) != (ssize_t)n || rename(tmp, fx.lock) != 0) _exit(1);
    _exit(0);
  }
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 2000, &l, &e), DCP_EBUSY);
  assert_non_null(strstr(e.msg, "host writer pid 777,"));
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* A holder SIGSTOPped past its expiry: another process takes the lease;
 * the resumed holder's check is DCP_ESTALE, its renewal and release do not
 * touch the new holder's file, and the new holder keeps passing checks. */
static void test_stopped_holder_taken_over(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  holder h;
  assert_int_equal(holder_start(&fx, ".lock", 300, &h).status, DCP_OK);
  assert_int_equal(kill(h.pid, SIGSTOP), 0);
  sleep_ms(300 + 150 + 100);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
  assert_int_equal(kill(h.pid, SIGCONT), 0);
  sleep_ms(200); /* its renewal thread wakes up and looks */
  reply r = holder_cmd(&h, 'c');
  assert_int_equal(r.status, DCP_ESTALE);
  if (!strstr(r.msg, "taken over by") && !strstr(r.msg, "expired"))
    fail_msg("stale message: %s", r.msg);
  assert_int_equal(holder_cmd(&h, 'c').status, DCP_ESTALE); /* sticky */
  assert_int_equal(holder_cmd(&h, 'r').status, DCP_OK);
  holder_end(&h, 0);
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  dcpi_lease_record now;
  assert_true(read_record(fx.lock, &now));
  assert_int_equal(now.pid, getpid());
  sleep_ms(250);
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* Stopped past its expiry + grace and resumed with nobody taking over: it
 * still fails its check (it cannot know that nobody did), never renews the
 * lease again, and the next process takes it at once. */
static void test_stopped_holder_alone(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  holder h;
  assert_int_equal(holder_start(&fx, ".lock", 300, &h).status, DCP_OK);
  assert_int_equal(kill(h.pid, SIGSTOP), 0);
  sleep_ms(300 + 150 + 100);
  assert_int_equal(kill(h.pid, SIGCONT), 0);
  reply r = holder_cmd(&h, 'c');
  assert_int_equal(r.status, DCP_ESTALE);
  assert_non_null(strstr(r.msg, "expire"));
  dcpi_lease_record before, after;
  assert_true(read_record(fx.lock, &before));
  assert_int_equal(before.pid, h.pid);
  sleep_ms(250);
  assert_true(read_record(fx.lock, &after));
  assert_int_equal(after.renewals, before.renewals); /* not renewed since */
  assert_true(after.expires_ms + after.grace_ms < dcpi_lease_wall_ms());
  assert_int_equal(holder_cmd(&h, 'r').status, DCP_OK);
  holder_end(&h, 0);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  int64_t t0 = mono_ms();
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
  assert_true(mono_ms() - t0 < 1000);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

/* ---- the race ------------------------------------------------------------------ */

#define RACERS 8
#define RACE_TTL 400

typedef struct win {
  int64_t start_ns, end_ns; /* acquire returned .. final check returned */
  int check_ok, pid_ok;
} win;

typedef struct race_shared {
  _Atomic int go;
  _Atomic int errors;
  _Atomic int busy;
  win wins[RACERS];
  char first_error[DCPI_ERR_MSG_MAX];
} race_shared;

/* One racer: try until it has held the lease once, then release it (even
 * racers) or die holding it (odd racers, so the next round is a break). */
static void racer(fixture *fx, race_shared *sh, int idx, const char *owner) {
  srand((unsigned)getpid());
  while (!atomic_load(&sh->go)) sleep_ms(1);
  dcpi_rt rt;
  dcpi_rt_begin(&rt, fx->ctx, fx->dir);
  if (dcpi_rt_open_storage(&rt, 0)) _exit(2);
  int64_t give_up = mono_ms() + 60000;
  while (mono_ms() < give_up) {
    dcpi_lease *l = NULL;
    dcpi_err e;
    dcp_status rc = dcpi_lease_acquire(&rt, ".lock", RACE_TTL, &l, &e);
    if (rc == DCP_EBUSY) {
      atomic_fetch_add(&sh->busy, 1);
      sleep_ms(1 + rand() % 8);
      continue;
    }
    if (rc) {
      if (atomic_fetch_add(&sh->errors, 1) == 0)
        snprintf(sh->first_error, sizeof sh->first_error, "%s", e.msg);
      _exit(3);
    }
    win *w = &sh->wins[idx];
    w->start_ns = mono_ns();
    int me = (int)getpid(), seen = 0;
    int fd = open(owner, O_RDWR | O_CREAT, 0666);
    if (fd < 0 || pwrite(fd, &me, sizeof me, 0) != (ssize_t)sizeof me) _exit(4);
    sleep_ms(20);
    if (pread(fd, &seen, sizeof seen, 0) != (ssize_t)sizeof seen) _exit(4);
    close(fd);
    w->check_ok = dcpi_lease_check(l, &e) == DCP_OK;
    w->end_ns = mono_ns();
    w->pid_ok = seen == me;
    if (idx % 2) _exit(0); /* dies holding it */
    dcpi_lease_release(l);
    dcpi_rt_end(&rt);
    _exit(0);
  }
  _exit(5);
}

static int by_start(const void *a, const void *b) {
  const win *x = a, *y = b;
  return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

/* Eight processes race to break an expired lease, then for every lease a
 * winner leaves behind (released, or held by a dead winner): each takes it
 * once. Exactly one holds it at any time: the winners' intervals (acquire
 * .. final check) never overlap, the pid each wrote into a shared file
 * under the lease was still its own at the end, and every winner's check
 * passes (a winner whose record another process replaced would fail it).
 * Two races. */
static void race_once(void) {
  fixture fx;
  fx_open(&fx, "posix", NULL);
  char owner[PATHCAP + 16];
  snprintf(owner, sizeof owner, "%s/owner", fx.dir);
  plant_record(fx.lock, 999999, 0x11, dcpi_lease_wall_ms() - 1000); /* expired */
  race_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  pid_t pids[RACERS];
  fflush(NULL);
  for (int i = 0; i < RACERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) racer(&fx, sh, i, owner);
  }
  atomic_store(&sh->go, 1);
  for (int i = 0; i < RACERS; i++) {
    int st;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("racer %d: status %d (errors %d: %s)", i, st, atomic_load(&sh->errors),
               sh->first_error);
  }
  assert_int_equal(atomic_load(&sh->errors), 0);
  assert_true(atomic_load(&sh->busy) > 0);
  win all[RACERS];
  int checks = 0;
  for (int i = 0; i < RACERS; i++) {
    all[i] = sh->wins[i];
    assert_true(all[i].start_ns > 0 && all[i].end_ns >= all[i].start_ns);
    if (!all[i].pid_ok) fail_msg("racer %d found another pid in the shared file", i);
    checks += all[i].check_ok;
  }
  printf("# race: %d of %d winners passed their check, %d busy answers\n", checks, RACERS,
         atomic_load(&sh->busy));
  qsort(all, RACERS, sizeof all[0], by_start);
  for (int i = 1; i < RACERS; i++)
    if (all[i].start_ns < all[i - 1].end_ns)
      fail_msg("two holders at once: [%" PRId64 ", %" PRId64 "] and [%" PRId64 ", %" PRId64 "]",
               all[i - 1].start_ns, all[i - 1].end_ns, all[i].start_ns, all[i].end_ns);
  assert_int_equal(checks, RACERS);
  munmap(sh, sizeof *sh);
  fx_close(&fx);
}

static void test_race(void **state) {
  (void)state;
  race_once();
  race_once();
}

/* ---- symlinks, plugins without EXCL ----------------------------------------------- */

/* A symlink at the lease name is refused, never followed: the file it
 * points to (or the missing one) is untouched. */
static void test_symlink_not_followed(void **state) {
  (void)state;
  fixture fx;
  fx_open(&fx, "posix", NULL);
  char outside[PATHCAP], victim[PATHCAP + 16], missing[PATHCAP + 16];
  snprintf(outside, sizeof outside, "/tmp/lease-victim-XXXXXX");
  assert_non_null(mkdtemp(outside));
  snprintf(victim, sizeof victim, "%s/victim", outside);
  snprintf(missing, sizeof missing, "%s/missing", outside);
  put_file(victim, "precious\n", 9);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL;
  dcpi_err e;
  const char *targets[] = {victim, missing};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(symlink(targets[i], fx.lock), 0);
    assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_EIO);
    assert_null(l);
    assert_non_null(strstr(e.msg, "symbolic link"));
    struct stat sb;
    assert_int_equal(lstat(fx.lock, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(unlink(fx.lock), 0);
  }
  char buf[32] = "";
  int fd = open(victim, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(read(fd, buf, sizeof buf), 9);
  close(fd);
  assert_memory_equal(buf, "precious\n", 9);
  struct stat sb;
  assert_int_equal(lstat(missing, &sb), -1);
  dcpi_rt_end(&rt);
  tu_remove_tree(outside);
  fx_close(&fx);
}

/* A storage plugin without DCP_STORAGE_CAP_EXCL: an unenforced lease,
 * nothing written, checks pass. */
static void test_plugin_without_excl(void **state) {
  (void)state;
  char plugins[PATHCAP];
  tu_plugin_dir(plugins, sizeof plugins);
  const void *t;
  dcpi_err e;
  assert_int_equal(dcpi_plugin_find(DCP_PLUGIN_STORAGE, "posix", plugins, &t, &e), DCP_OK);
  static dcp_storage_plugin noexcl;
  noexcl = *(const dcp_storage_plugin *)t;
  noexcl.name = "noexcl";
  noexcl.caps &= ~(uint64_t)DCP_STORAGE_CAP_EXCL;
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &noexcl), DCP_OK);
  fixture fx;
  fx_open(&fx, "noexcl", NULL);
  dcpi_rt rt;
  rt_open(&fx, &rt);
  dcpi_lease *l = NULL, *l2 = NULL;
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l, &e), DCP_OK);
  assert_int_equal(dcpi_lease_acquire(&rt, ".lock", 300, &l2, &e), DCP_OK);
  assert_false(dcpi_lease_enforced(l));
  assert_int_equal(dcpi_lease_check(l, &e), DCP_OK);
  struct stat sb;
  assert_int_equal(lstat(fx.lock, &sb), -1);
  dcpi_lease_release(l2);
  dcpi_lease_release(l);
  dcpi_rt_end(&rt);
  fx_close(&fx);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_record_format),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_busy_posix),
      cmocka_unit_test(test_busy_sharedfs),
      cmocka_unit_test(test_release_removes_posix),
      cmocka_unit_test(test_release_removes_sharedfs),
      cmocka_unit_test(test_killed_holder),
      cmocka_unit_test(test_dead_holder_elsewhere),
      cmocka_unit_test(test_own_leftover),
      cmocka_unit_test(test_empty_and_garbage),
      cmocka_unit_test(test_stopped_holder_taken_over),
      cmocka_unit_test(test_stopped_holder_alone),
      cmocka_unit_test(test_race),
      cmocka_unit_test(test_symlink_not_followed),
      cmocka_unit_test(test_plugin_without_excl),
  };
  return TU_RUN(tests, NULL, NULL);
}
