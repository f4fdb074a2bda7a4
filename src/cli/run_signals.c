/* cli/run_signals.c: SIGINT and SIGTERM during training. The first one sets the trainer's stop
 * flag (bt_trainer_opts.stop): the step under way finishes, a checkpoint is written when there is
 * a directory, the summary is printed, and `baton run` exits 128 + the signal (130, 143). A second
 * one stops at once: the handler puts back the handler it replaced (main's, from
 * io/atomic_file.h: it removes a checkpoint being written, then dies of the signal) and raises the
 * signal again. A signal the process was started ignoring (nohup, a background job of a script)
 * stays ignored. Installed only around bt_trainer_run; everything the handler does is
 * async-signal-safe (a flag, write(2), fcntl, sigaction, raise).
 *
 * Under mpirun the signal comes from Open MPI (SIGINT or SIGTERM to mpirun becomes SIGTERM to
 * every rank, SIGKILL odls_base_sigkill_timeout seconds later, 1 by default) and the ranks agree
 * to stop after the same step (bt_engine_agree_stop). From then on mpirun no longer forwards the
 * ranks' output (seen with Open MPI 4.1: a rank's write to its stdout blocked until it was
 * killed), so the handler makes standard output non-blocking: what cannot be written is dropped
 * rather than holding rank 0 back from the checkpoint and a clean exit. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli/run.h"

static const int stop_signals[] = {SIGINT, SIGTERM};
#define N_STOP_SIGNALS 2

static volatile sig_atomic_t stop_flag, stop_signal, launched;
static struct sigaction replaced[N_STOP_SIGNALS];
static int installed[N_STOP_SIGNALS];

static void on_stop(int sig)
{
    for (int i = 0; stop_flag && i < N_STOP_SIGNALS; i++) {
        if (stop_signals[i] != sig) continue;
        static const char now[] = "\nbaton run: stopping now\n";
        ssize_t ignored = write(STDERR_FILENO, now, sizeof now - 1);
        (void)ignored;
        sigaction(sig, &replaced[i], NULL);
        raise(sig); /* delivered when this handler returns, to the handler put back */
        return;
    }
    stop_signal = sig;
    stop_flag = 1;
    if (launched) { /* see bt_cli_stop_under_launcher */
        int fl = fcntl(STDOUT_FILENO, F_GETFL);
        if (fl != -1) fcntl(STDOUT_FILENO, F_SETFL, fl | O_NONBLOCK);
    }
    static const char later[] = "\nbaton run: stopping after this step (press Ctrl-C again to stop at once)\n";
    ssize_t ignored = write(STDERR_FILENO, later, sizeof later - 1);
    (void)ignored;
}

volatile sig_atomic_t *bt_cli_stop_flag(void) { return &stop_flag; }

void bt_cli_stop_under_launcher(void) { launched = 1; }

volatile sig_atomic_t *bt_cli_stop_begin(void)
{
    stop_flag = 0;
    stop_signal = 0;
    for (int i = 0; i < N_STOP_SIGNALS; i++) {
        struct sigaction sa;
        installed[i] = 0;
        if (sigaction(stop_signals[i], NULL, &replaced[i]) != 0 || replaced[i].sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        for (int k = 0; k < N_STOP_SIGNALS; k++) sigaddset(&sa.sa_mask, stop_signals[k]);
        installed[i] = sigaction(stop_signals[i], &sa, NULL) == 0;
    }
    return &stop_flag;
}

int bt_cli_stop_end(void)
{
    for (int i = 0; i < N_STOP_SIGNALS; i++)
        if (installed[i]) sigaction(stop_signals[i], &replaced[i], NULL), installed[i] = 0;
    return stop_flag ? (int)stop_signal : 0;
}
