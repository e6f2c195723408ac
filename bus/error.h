/*
 * error.h - the one error convention of tickbus.
 *
 * Every function returns 0 (or a count) on success and a negative TB_* code
 * on failure; nothing in tickbus sets errno for its caller.
 *
 *  - Hot-path calls (tb_pub_offer, tb_sub_poll, ...) return a count or one of
 *    the named conditions below (TB_BACK_PRESSURED .. TB_GAP).  They never
 *    format a message: a condition is an expected outcome, not a failure.
 *  - Set-up calls (open, close, config, memory) return a TB_E* code and leave
 *    a human-readable message in a thread-local buffer, read with
 *    tb_errmsg().  Each layer that passes an error up may prepend its own
 *    context with tb_error_prepend(), so the final message reads from the
 *    outermost operation inwards: "tb_publisher_open: stream 'quotes': shm:
 *    open /dev/shm/tb.quotes: Permission denied".
 *
 * Foreign conventions (errno, ibv_* positive returns) are translated once,
 * at the call site, with tb_error_sys() / tb_error_set().
 */
#ifndef TB_ERROR_H
#define TB_ERROR_H

#include <tickbus/tickbus_err.h>

#include <stdarg.h>

/* Records a message for `code` and returns `code`, so callers can write
 * `return tb_error_set(TB_EINVAL, "ring_size %zu is not a power of two", n);` */
int tb_error_set(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* As tb_error_set, appending ": <strerror(errnum)>" and mapping errnum to a
 * TB_E* code (ENOMEM -> TB_ENOMEM, ETIMEDOUT -> TB_ETIMEDOUT, ...). */
int tb_error_sys(int errnum, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Adds "<context>: " in front of the current message; returns `code`. */
int tb_error_prepend(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clears the thread-local message. */
void tb_error_clear(void);

/* Writes a warning line to stderr, prefixed "tickbus: warning: ".  Used for
 * conditions that degrade but do not stop (a core that is not isolated,
 * hugepages unavailable).  TICKBUS_QUIET=1 in the environment silences it. */
void tb_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Informational line to stderr when TICKBUS_VERBOSE=1 (e.g. which page size
 * a ring got). */
void tb_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
