/* parallel.c — a parallel loop over independent jobs (see parallel.h). */
#define _GNU_SOURCE
#include "base/parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define MAX_THREADS 64

typedef struct loop {
  atomic_size_t next;
  size_t n;
  void (*fn)(void *arg, size_t i);
  void *arg;
} loop;

/* Take indices until none is left. */
static void *run_loop(void *p) {
  loop *l = p;
  for (size_t i; (i = atomic_fetch_add(&l->next, 1)) < l->n;) l->fn(l->arg, i);
  return NULL;
}

void dcpi_parallel_for(size_t n, unsigned threads, void (*fn)(void *arg, size_t i), void *arg) {
  loop l = {.n = n, .fn = fn, .arg = arg};
  atomic_init(&l.next, 0);
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (threads > n) threads = (unsigned)n;
  pthread_t tid[MAX_THREADS];
  unsigned started = 0;
  while (started + 1 < threads && pthread_create(&tid[started], NULL, run_loop, &l) == 0)
    started++;
  run_loop(&l);
  for (unsigned k = 0; k < started; k++) pthread_join(tid[k], NULL);
}

unsigned dcpi_parallel_threads(unsigned max) {
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  unsigned n = cpus > 0 ? (unsigned)cpus : 1;
  if (max < 1) max = 1;
  return n < max ? n : max;
}
