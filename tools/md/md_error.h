/*
 * md_error.h - how the market-data core (book, feed) reports errors.
 *
 * The core is built on tickbus's public API like any application, so it
 * keeps its own record of what went wrong, in the library's convention
 * (tickbus_err.h):
 *
 *  - per-message calls (tb_book_add, tb_itch_decode, ...) return 0, a count
 *    or a negative code of their module's own range (TB_MOLD_E* -101..-108,
 *    TB_ITCH_E* -111..-115, TB_BOOK_E* -121..-127) and never format a
 *    message: a refused message is an expected outcome, counted by the
 *    caller;
 *  - set-up calls (tb_book_create, tb_feed_open) return 0 or a public TB_E*
 *    code and leave a message in a thread-local buffer, read with
 *    tb_md_error_msg(); each level that passes an error up prepends its
 *    context, so the message reads from the outermost operation inwards:
 *    "feed: book: 1048576 orders, ...: mem: mmap 67108864 bytes: Cannot
 *    allocate memory".
 *
 * Threads: the buffer is per thread; every call may run on any thread.
 */
#ifndef TB_MD_ERROR_H
#define TB_MD_ERROR_H

#include <tickbus/tickbus_err.h>

/* Records the message and returns `code`:
 *   return tb_md_error_set(TB_EINVAL, "feed: no group address"); */
int tb_md_error_set(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* As tb_md_error_set, appending ": <strerror(errnum)>"; returns the TB_E*
 * code for `errnum` (ENOMEM -> TB_ENOMEM, EINVAL -> TB_EINVAL, EADDRINUSE
 * -> TB_EBUSY, anything else TB_ESYS). */
int tb_md_error_sys(int errnum, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Puts "<context>: " in front of the recorded message; returns `code`. */
int tb_md_error_prepend(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The message of the last set-up failure on this thread ("" if none). */
const char *tb_md_error_msg(void);

#endif
