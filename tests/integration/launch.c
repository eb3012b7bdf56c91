/* launch — run N copies of a command as ranks 0..N-1 of a world of N
 * (environment DCP_TEST_RANK, DCP_TEST_WORLD), the way mpirun would, for
 * the collectives that need no MPI (file exchange). Fails when any copy
 * fails or the whole run exceeds its time limit (then all are killed).
 *
 *   launch N SECONDS command [args...]
 *
 * A rank that stops (SIGSTOP: a stalled rank in the no-hang tests) can
 * never finish: once every other rank has ended, launch kills it (SIGKILL)
 * and counts it as failed. With DCP_LAUNCH_FAULT_RANK=R in the environment,
 * rank R is the one a test makes stall or exit on purpose: how it ends is
 * not counted (it is still killed when stopped), only the others' results.
 * SIGTERM (a harness's timeout) kills every rank too.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t terminated;

static void on_term(int sig) {
  (void)sig;
  terminated = 1;
}

/* The index of pid in pids[0..n), or -1. */
static int rank_of(const pid_t *pids, int n, pid_t pid) {
  for (int r = 0; r < n; r++)
    if (pids[r] == pid) return r;
  return -1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: launch N SECONDS command [args...]\n");
    return 2;
  }
  int n = atoi(argv[1]), limit = atoi(argv[2]);
  if (n < 1 || n > 256 || limit < 1) return 2;
  const char *fr = getenv("DCP_LAUNCH_FAULT_RANK");
  int fault_rank = fr && fr[0] ? atoi(fr) : -1;
  signal(SIGTERM, on_term); /* a harness's timeout: take the ranks down too */
  pid_t pids[256];
  int stopped[256] = {0};
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) return perror("fork"), 1;
    if (pids[r] == 0) {
      char rank[16], world[16];
      snprintf(rank, sizeof rank, "%d", r);
      snprintf(world, sizeof world, "%d", n);
      setenv("DCP_TEST_RANK", rank, 1);
      setenv("DCP_TEST_WORLD", world, 1);
      execvp(argv[3], argv + 3);
      perror("exec");
      _exit(127);
    }
  }
  int failed = 0, left = n, nstopped = 0;
  time_t start = time(NULL);
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    int r = p > 0 ? rank_of(pids, n, p) : -1;
    if (p > 0 && WIFSTOPPED(status)) {
      nstopped += !stopped[r];
      stopped[r] = 1;
      continue;
    }
    if (p > 0 && WIFCONTINUED(status)) {
      nstopped -= stopped[r];
      stopped[r] = 0;
      continue;
    }
    if (p > 0) {
      left--;
      nstopped -= stopped[r];
      stopped[r] = 0;
      if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && r != fault_rank) {
        fprintf(stderr, "launch: rank %d failed (status %d)\n", r, status);
        failed = 1;
      }
      continue;
    }
    if (nstopped > 0 && nstopped == left) { /* nobody left to wake them */
      for (int k = 0; k < n; k++) {
        if (!stopped[k]) continue;
        fprintf(stderr, "launch: rank %d is stopped and every other rank has ended: killing it\n",
                k);
        kill(pids[k], SIGKILL);
        if (k != fault_rank) failed = 1;
      }
      nstopped = 0;
      for (int k = 0; k < n; k++) stopped[k] = 0;
      continue;
    }
    if (terminated || time(NULL) - start > limit) {
      if (terminated) fprintf(stderr, "launch: terminated, killing the ranks\n");
      else fprintf(stderr, "launch: time limit of %d s passed, killing the ranks\n", limit);
      for (int k = 0; k < n; k++) kill(pids[k], SIGKILL);
      while (wait(NULL) > 0) {
      }
      return 1;
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  }
  return failed;
}
