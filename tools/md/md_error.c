/*
 * md_error.c - the market-data core's thread-local error message (see
 * md_error.h).  Set-up paths only.
 */
#include "tools/md/md_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Room for a few levels of context around a path or an address. */
#define MD_ERROR_MAX 512

static __thread char msg[MD_ERROR_MAX];

const char *tb_md_error_msg(void)
{
	return msg;
}

int tb_md_error_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return code;
}

int tb_md_error_sys(int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = strlen(msg);
	snprintf(msg + n, sizeof(msg) - n, ": %s", strerror(errnum));
	switch (errnum) {
	case ENOMEM: return TB_ENOMEM;
	case EINVAL: return TB_EINVAL;
	case EADDRINUSE: return TB_EBUSY;
	default: return TB_ESYS;
	}
}

int tb_md_error_prepend(int code, const char *fmt, ...)
{
	char inner[MD_ERROR_MAX];
	va_list ap;
	int n;

	memcpy(inner, msg, sizeof(inner));
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* The inner message is cut where the whole would not fit. */
	if (inner[0] && n >= 0 && (size_t)n + 2 < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, ": %.*s",
			 (int)(sizeof(msg) - (size_t)n - 3), inner);
	return code;
}
