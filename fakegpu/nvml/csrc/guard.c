/* A SIGBUS guard around every access to the shared mapping.
 *
 * The state file is an ordinary file: anyone may truncate it or copy another file over it
 * while clients have it mapped, and touching a mapped page beyond the new end of file raises
 * SIGBUS. No check before the access can close that window (the file may shrink right after
 * it), so accesses run inside fg_guarded(): a SIGBUS whose address lies in the guarded range
 * of the faulting thread jumps back and the access reports failure; every other SIGBUS goes
 * to the handler that was installed before ours, or gets the default action, exactly as if
 * this library were not there. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "fakegpu.h"

struct guard {
    sigjmp_buf env;
    const char *lo, *hi;
};

/* initial-exec: the handler must not call into the TLS allocator */
static __thread struct guard *active __attribute__((tls_model("initial-exec")));
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    struct guard *g = active;
    /* si_code > 0: raised by the kernel for a fault, not sent by kill() */
    if (g != NULL && si != NULL && si->si_code > 0 && (const char *)si->si_addr >= g->lo &&
        (const char *)si->si_addr < g->hi) {
        active = NULL;
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* we leave the handler by jumping */
        siglongjmp(g->env, 1);
    }
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
        previous.sa_sigaction(sig, si, ctx);
        return;
    }
    if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL &&
        previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* Not ours and nobody else's: restore the default; the faulting access repeats and the
     * process ends with SIGBUS as it would have without us. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART; /* SA_ONSTACK: Go requires it */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &previous);
}

int fg_guarded(const void *base, size_t len, void (*fn)(void *), void *arg)
{
    pthread_once(&installed, install);
    struct guard g;
    struct guard *outer = active;
    g.lo = base;
    g.hi = (const char *)base + len;
    if (sigsetjmp(g.env, 0)) {
        active = outer;
        return -1;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    active = &g;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    fn(arg);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    active = outer;
    return 0;
}
