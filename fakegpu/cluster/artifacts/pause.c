/*
 * fakegpu's sandbox ("pause") program: PID 1 of every pod sandbox.
 *
 * It holds the pod's namespaces open by existing, so it does nothing but wait:
 *  - SIGTERM / SIGINT end it (exit 0), which is how the runtime stops a sandbox;
 *  - as PID 1 of a shared PID namespace it inherits orphans, so it reaps them on SIGCHLD,
 *    otherwise they would stay zombies for the sandbox's lifetime.
 * Built statically (gcc -static) so the image needs nothing but this one file.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

/* Only wakes sigsuspend(); the reaping happens in the main loop, outside the handler. */
static void on_child(int sig) { (void)sig; }

/* Reap every exited child; never block, there may be none left. */
static void reap(void) {
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		printf("fakegpu-pause 1\n");
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "fakegpu-pause: warning: not PID 1, zombies of others stay\n");

	/* Block the signals we handle, then wait for them with sigsuspend(): no race between
	 * checking stop_signal and going to sleep. */
	sigset_t handled, waitmask;
	sigemptyset(&handled);
	sigaddset(&handled, SIGTERM);
	sigaddset(&handled, SIGINT);
	sigaddset(&handled, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &handled, &waitmask) != 0) {
		perror("fakegpu-pause: sigprocmask");
		return 2;
	}
	struct sigaction stop = {.sa_handler = on_stop};
	/* A real handler, not SIG_IGN: ignoring SIGCHLD would auto-reap our own children but
	 * never wake us; with a handler the loop below reaps every orphan it inherits. */
	struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGTERM, &stop, NULL) != 0 || sigaction(SIGINT, &stop, NULL) != 0 ||
	    sigaction(SIGCHLD, &child, NULL) != 0) {
		perror("fakegpu-pause: sigaction");
		return 2;
	}
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGCHLD);

	while (!stop_signal) {
		sigsuspend(&waitmask); /* returns -1/EINTR after a handler ran */
		reap();
	}
	fprintf(stderr, "fakegpu-pause: signal %d, exiting\n", (int)stop_signal);
	return 0;
}
