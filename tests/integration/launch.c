/* launch — run N copies of a command as ranks 0..N-1 of a world of N
 * (environment DCP_TEST_RANK, DCP_TEST_WORLD), the way mpirun would, for
 * the collectives that need no MPI (file exchange). Fails when any copy
 * fails or the whole run exceeds its time limit (then all are killed).
 *
 *   launch N SECONDS command [args...]
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: launch N SECONDS command [args...]\n");
    return 2;
  }
  int n = atoi(argv[1]), limit = atoi(argv[2]);
  if (n < 1 || n > 256 || limit < 1) return 2;
  pid_t pids[256];
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
  int failed = 0, left = n;
  time_t start = time(NULL);
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      left--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        for (int r = 0; r < n; r++)
          if (pids[r] == p) fprintf(stderr, "launch: rank %d failed (status %d)\n", r, status);
        failed = 1;
      }
      continue;
    }
    if (time(NULL) - start > limit) {
      fprintf(stderr, "launch: time limit of %d s passed, killing the ranks\n", limit);
      for (int r = 0; r < n; r++) kill(pids[r], SIGKILL);
      while (wait(NULL) > 0) {
      }
      return 1;
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  }
  return failed;
}
