/*
 * hist_text.h - what the histogram's text formats share (bus/hist_text.c):
 * numbers printed in the C locale, with HdrHistogram's (Java's) rounding.
 *
 * The .hgrm and CSV outputs (hist_text.c) and the interval log (hist_log.c)
 * print the same way, so that a file tickbus writes reads back in
 * HdrHistogram's tools digit for digit.  Internal: not installed, and hidden
 * from the shared library (the map exports tb_hist_*).
 *
 * Threads: the locale switch is per thread (uselocale), so any thread may
 * print while others run with their own locale.
 */
#ifndef TB_HIST_TEXT_H
#define TB_HIST_TEXT_H

#include <locale.h>
#include <stddef.h>

#define TB_HIST_TEXT_HIDDEN __attribute__((visibility("hidden")))

/* Room for any double tb_hist_text_fixed prints: the 309 integer digits of
 * largest double, a sign, a point and the precisions used here. */
#define TB_HIST_TEXT_NUM_MAX 400

/* The calling thread's locale, saved while it prints in the C locale. */
typedef struct tb_hist_text_locale {
	locale_t c, saved;
} tb_hist_text_locale_t;

/* Switches the calling thread to the C locale for numbers (a "," decimal
 * point would break the files), saving its own in `s`.  Returns 0, or a
 * TB_E* code (TB_ENOMEM, TB_ESYS) with a message; nothing to undo then. */
TB_HIST_TEXT_HIDDEN
int tb_hist_text_locale_enter(tb_hist_text_locale_t *s);

/* Restores the locale saved by a successful tb_hist_text_locale_enter. */
TB_HIST_TEXT_HIDDEN
void tb_hist_text_locale_leave(tb_hist_text_locale_t *s);

/*
 * Writes `v` (finite) with `prec` decimals into `out` (`cap` bytes,
 * TB_HIST_TEXT_NUM_MAX is always enough) as Java's Formatter does: the
 * shortest decimal that reads back as `v`, rounded half away from zero.
 * printf's %.Nf rounds the exact binary value half to even, and differs on
 * ties (0.9997802734375) and near-ties (1.005).
 */
TB_HIST_TEXT_HIDDEN
void tb_hist_text_fixed(char *out, size_t cap, double v, int prec);

#endif
