/* parallel.h — run independent jobs of one loop on a few threads.
 *
 * For pure layers whose work splits into jobs that share nothing but
 * read-only input (the metadata encoder's chunk lists): the caller keeps
 * each job's output apart and combines them in index order, so the result
 * does not depend on how many threads ran or which took what. */
#ifndef DCP_BASE_PARALLEL_H
#define DCP_BASE_PARALLEL_H

#include <stddef.h>

/* Run fn(arg, i) once for every i in [0, n), on the calling thread and up
 * to threads - 1 more, each taking the next index not yet taken. Returns
 * when every call has returned. A thread that cannot be created only means
 * fewer of them (the caller runs the rest), so this cannot fail. fn must be
 * safe to run concurrently with itself for different i. */
void dcpi_parallel_for(size_t n, unsigned threads, void (*fn)(void *arg, size_t i), void *arg);

/* How many threads dcpi_parallel_for should use for work that pays for
 * them: the CPUs this process may run on, at most max (at least 1). */
unsigned dcpi_parallel_threads(unsigned max);

#endif
