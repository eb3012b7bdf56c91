/* storage_cases_excl.c — the shared exclusive-creation scenarios of the
 * storage plugin tests (DCP_FILE_EXCL; storage_testutil.h). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage_testutil.h"

/* Write data to a new file `name` with DCP_FILE_WRITE | DCP_FILE_EXCL. */
static int excl_put(const stu_plugin *sp, dcp_storage *st, const char *name, const char *data, dcp_plugin_err *err) {
  dcp_storage_file *f;
  int rc = sp->p->file_open(st, name, DCP_FILE_WRITE | DCP_FILE_EXCL, &f, err);
  if (rc) return rc;
  assert_int_equal(sp->diag->file_is_direct(f), 0); /* never O_DIRECT */
  assert_int_equal(sp->p->file_write(f, data, strlen(data), err), DCP_OK);
  return sp->p->file_close(f, err);
}

/* The whole of a small file, NUL-terminated. */
static void excl_get(const stu_plugin *sp, dcp_storage *st, const char *name, char *buf, size_t cap) {
  dcp_plugin_err err = {{0}};
  uint64_t size;
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_size(st, name, &size, &err), DCP_OK);
  assert_true(size < cap);
  assert_int_equal(sp->p->file_open(st, name, DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_read(f, buf, (size_t)size, 0, &err), DCP_OK);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  buf[size] = '\0';
}

/* A small file at path with contents s (plain POSIX, outside the plugin). */
static void excl_plant(const char *path, const char *s) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  assert_int_equal(fputs(s, fp) >= 0, 1);
  assert_int_equal(fclose(fp), 0);
}

/* EXCL creates a new name, and refuses an existing one with DCP_EEXIST
 * (made by EXCL or by a plain WRITE: contents untouched) and a symlink,
 * live or dangling, at the name (its target neither written nor created).
 * Only DCP_FILE_WRITE | DCP_FILE_EXCL is a valid combination. */
void stu_case_excl(const stu_plugin *sp, stu_locate_fn locate, const char *options) {
  char parent[STU_PATH], root[STU_PATH], dir[STU_PATH], buf[64];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(excl_put(sp, st, ".lock", "first\n", &err), DCP_OK);
  assert_int_equal(excl_put(sp, st, ".lock", "second\n", &err), DCP_EEXIST);
  assert_non_null(strstr(err.msg, ".lock"));
  excl_get(sp, st, ".lock", buf, sizeof buf);
  assert_string_equal(buf, "first\n");
  assert_int_equal(sp->p->file_open(st, "plain", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_write(f, "plain", 5, &err), DCP_OK);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  assert_int_equal(excl_put(sp, st, "plain", "x", &err), DCP_EEXIST);
  excl_get(sp, st, "plain", buf, sizeof buf);
  assert_string_equal(buf, "plain");
  assert_int_equal(sp->p->remove(st, ".lock", &err), DCP_OK);
  assert_int_equal(excl_put(sp, st, ".lock", "again\n", &err), DCP_OK); /* free again */
  assert_int_equal(sp->p->file_open(st, "r", DCP_FILE_READ | DCP_FILE_EXCL, &f, &err),
                   DCP_EINVAL);
  assert_int_equal(sp->p->file_open(st, "r", DCP_FILE_EXCL, &f, &err), DCP_EINVAL);
  assert_int_equal(excl_put(sp, st, "bad/name", "x", &err), DCP_ENAME);
  /* symlinks at the name: refused, never followed */
  char victim[STU_PATH], missing[STU_PATH], link[STU_PATH];
  stu_path(victim, sizeof victim, parent, "victim");
  stu_path(missing, sizeof missing, parent, "missing");
  excl_plant(victim, "precious");
  const char *targets[] = {victim, missing};
  const char *names[] = {"link.lock", "dang.lock"};
  for (int i = 0; i < 2; i++) {
    locate(sp, root, names[i], dir, sizeof dir);
    stu_path(link, sizeof link, dir, names[i]);
    assert_int_equal(symlink(targets[i], link), 0);
    assert_int_equal(excl_put(sp, st, names[i], "evil", &err), DCP_EEXIST);
    assert_non_null(strstr(err.msg, "symbolic link"));
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
  }
  FILE *fp = fopen(victim, "r");
  assert_non_null(fp);
  assert_non_null(fgets(buf, sizeof buf, fp));
  fclose(fp);
  assert_string_equal(buf, "precious");
  struct stat sb;
  assert_int_equal(lstat(missing, &sb), -1);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* Processes racing to create the same names, each through its own
 * backend: exactly one creator per name. */
void stu_case_excl_race(const stu_plugin *sp, const char *options) {
  enum { PROCS = 6, NAMES = 40 };
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  _Atomic int *wins = mmap(NULL, NAMES * sizeof *wins, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(wins != MAP_FAILED);
  for (int i = 0; i < NAMES; i++) atomic_init(&wins[i], 0);
  pid_t pids[PROCS];
  fflush(NULL);
  for (int p = 0; p < PROCS; p++) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      dcp_storage_config cfg = {sizeof cfg, root, 0, p, PROCS, options};
      dcp_storage *mine;
      dcp_plugin_err err = {{0}};
      if (sp->p->open(&cfg, &mine, &err)) _exit(2);
      for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "n%d.lock", (i + p) % NAMES);
        dcp_storage_file *f;
        int rc = sp->p->file_open(mine, name, DCP_FILE_WRITE | DCP_FILE_EXCL, &f, &err);
        if (rc == DCP_OK) {
          atomic_fetch_add(&wins[(i + p) % NAMES], 1);
          if (sp->p->file_close(f, &err)) _exit(3);
        } else if (rc != DCP_EEXIST) {
          _exit(4);
        }
      }
      sp->p->close(mine);
      _exit(0);
    }
  }
  for (int p = 0; p < PROCS; p++) {
    int status;
    assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (int i = 0; i < NAMES; i++) assert_int_equal(atomic_load(&wins[i]), 1);
  munmap(wins, NAMES * sizeof *wins);
  sp->p->close(st);
  stu_rmrf(parent);
}

