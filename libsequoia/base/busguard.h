/* Reading a file mapping without dying of SIGBUS (issue 17, docs/estimator.md "Reading").
 *
 * A page of a file mapping whose file was truncated after the page was mapped raises SIGBUS on
 * access. The estimator reads corpus chunks through mappings, so a corpus truncated while it is
 * being read would kill the process. While at least one guard is installed (sq_bus_install,
 * counted; the corpus reader installs one per mapped corpus) a process-wide SIGBUS handler
 * looks at the faulting thread: inside a guarded region it jumps back to the region's
 * sigsetjmp, which then reports an error; anywhere else it hands the signal to the handler that
 * was there before (or to the default action: the process dies as it would have).
 *
 *     sigjmp_buf jb;
 *     if (sigsetjmp(jb, 0)) { sq_bus_leave(); ...report "truncated while being read"... }
 *     sq_bus_enter(&jb);
 *     ...read the mapping...
 *     sq_bus_leave();
 *
 * Locals changed inside the region and used after the jump must be volatile. */
#ifndef SQ_BASE_BUSGUARD_H
#define SQ_BASE_BUSGUARD_H

#include <setjmp.h>

/* 0, or -1 when the handler cannot be installed (then nothing is guarded). */
int sq_bus_install(void);
void sq_bus_uninstall(void);

void sq_bus_enter(sigjmp_buf *jb);
void sq_bus_leave(void);

#endif
