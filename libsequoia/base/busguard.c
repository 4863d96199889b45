/* SIGBUS from truncated file mappings turned into errors (busguard.h). */
#include "libsequoia/base/busguard.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int installed;                 /* count of sq_bus_install without uninstall */
static struct sigaction previous;     /* the handler before ours                   */
static _Thread_local sigjmp_buf *active;

static void on_bus(int sig, siginfo_t *info, void *uctx)
{
    sigjmp_buf *jb = active;
    if (jb) {
        active = NULL;
        siglongjmp(*jb, 1);
    }
    /* not ours: as if we had never been there */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, info, uctx);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* default action: put it back; returning re-executes the access, which faults again */
    signal(SIGBUS, SIG_DFL);
}

int sq_bus_install(void)
{
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (installed == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_bus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &previous) != 0)
            rc = -1;
    }
    if (rc == 0)
        installed++;
    pthread_mutex_unlock(&mu);
    return rc;
}

void sq_bus_uninstall(void)
{
    pthread_mutex_lock(&mu);
    if (installed > 0 && --installed == 0)
        sigaction(SIGBUS, &previous, NULL);
    pthread_mutex_unlock(&mu);
}

void sq_bus_enter(sigjmp_buf *jb)
{
    active = jb;
}

void sq_bus_leave(void)
{
    active = NULL;
}
