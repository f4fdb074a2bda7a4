/* cli/run_progress.c: the progress bar `baton run` draws on a terminal during training. One line,
 * redrawn with '\r', never wider than the terminal (TIOCGWINSZ on stdout, else $COLUMNS, else 80;
 * the width is read at every redraw, so resizing the window is followed): the counts and numbers
 * first, then the elapsed time and the ETA (from this run's own steps: a resumed run does not
 * count the steps it skipped), and the bar takes what is left. On a narrow terminal the numbers
 * that matter least go first (bubble, samples/s, step ms, lr), then the bar shrinks to nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/run.h"

static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    int w = c ? atoi(c) : 0;
    return w > 0 ? w : 80;
}

/* "1:02:03" or "2:03" */
static const char *clock_text(double s, char *buf, size_t size)
{
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

void bt_cli_progress(int64_t step, int64_t first, int64_t total, int64_t epoch, const bt_step_result *r,
                     double loss_avg, double elapsed_s, int64_t tokens)
{
    int width = terminal_width() - 1; /* the last column would wrap on some terminals */
    char el[32], eta[32], fields[4][64], line[1024];
    int64_t done = step - first;
    double left = done > 0 ? elapsed_s / (double)done * (double)(total - step) : 0;
    snprintf(fields[0], sizeof fields[0], "lr %.2e", r->lr);
    snprintf(fields[1], sizeof fields[1], "%.1f ms", r->step_ms);
    if (tokens > 0) snprintf(fields[2], sizeof fields[2], "%.0f tokens/s", r->samples_per_s * (double)tokens);
    else snprintf(fields[2], sizeof fields[2], "%.0f samples/s", r->samples_per_s);
    snprintf(fields[3], sizeof fields[3], "bubble %.1f%%", 100 * r->bubble);
    char head[160], tail[96];
    snprintf(head, sizeof head, "%lld/%lld  epoch %lld  loss %.4f", (long long)step, (long long)total,
             (long long)epoch + 1, loss_avg);
    snprintf(tail, sizeof tail, "%s<%s", clock_text(elapsed_s, el, sizeof el), clock_text(left, eta, sizeof eta));
    int keep = 4; /* fields shown, dropped from the end while the line does not fit */
    for (;;) {
        char mid[320] = "";
        for (int i = 0; i < keep; i++) {
            strcat(mid, "  ");
            strcat(mid, fields[i]); /* 4 fields of under 64 bytes: mid holds them */
        }
        int text = (int)(strlen(head) + strlen(mid) + 2 + strlen(tail));
        int bar = width - text - 3; /* "[" bar "] " */
        if (bar >= 10 || keep == 0) {
            if (bar > 40) bar = 40;
            if (bar < 0) bar = 0;
            char b[48] = "";
            int filled = total > 0 ? (int)((int64_t)bar * step / total) : 0;
            for (int i = 0; i < bar; i++) b[i] = i < filled ? '#' : '-';
            b[bar] = '\0';
            if (bar > 0) snprintf(line, sizeof line, "[%s] %s%s  %s", b, head, mid, tail);
            else snprintf(line, sizeof line, "%s%s  %s", head, mid, tail);
            break;
        }
        keep--;
    }
    if ((int)strlen(line) > width && width > 0) line[width] = '\0';
    /* \r, the line, then clear to the end of the line (a shorter line leaves no remnant) */
    printf("\r%s\033[K", line);
    if (step == total) printf("\n");
}
