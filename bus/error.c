/*
 * error.c - thread-local error messages and tb_strerror().
 */
#include "bus/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB_ERRMSG_MAX 512

static __thread char errmsg[TB_ERRMSG_MAX];

const char *tb_errmsg(void) { return errmsg; }

void tb_error_clear(void) { errmsg[0] = '\0'; }

int tb_error_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	return code;
}

static int code_of_errno(int errnum)
{
	switch (errnum) {
	case ENOMEM: return TB_ENOMEM;
	case EINVAL: return TB_EINVAL;
	case ETIMEDOUT: return TB_ETIMEDOUT;
	case ENOENT: return TB_ENOENT;
	case EBUSY: case EADDRINUSE: return TB_EBUSY;
	case EIO: return TB_EIO;
	case ENOSYS: case EOPNOTSUPP: return TB_ENOTSUP;
	case EMSGSIZE: return TB_EMSGSIZE;
	default: return TB_ESYS;
	}
}

int tb_error_sys(int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	n = strlen(errmsg);
	snprintf(errmsg + n, sizeof(errmsg) - n, ": %s", strerror(errnum));
	return code_of_errno(errnum);
}

int tb_error_prepend(int code, const char *fmt, ...)
{
	char old[TB_ERRMSG_MAX];
	size_t n;
	va_list ap;

	memcpy(old, errmsg, sizeof(old));
	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	n = strlen(errmsg);
	if (old[0] && n + 2 < sizeof(errmsg)) {
		memcpy(errmsg + n, ": ", 2);
		n += 2;
		size_t room = sizeof(errmsg) - n - 1, len = strlen(old);

		/* Truncates the inner message if the whole would not fit. */
		if (len > room)
			len = room;
		memcpy(errmsg + n, old, len);
		errmsg[n + len] = '\0';
	}
	return code;
}

static void vlog(const char *tag, const char *fmt, va_list ap)
{
	char line[TB_ERRMSG_MAX];

	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "tickbus: %s%s\n", tag, line);
}

void tb_warn(const char *fmt, ...)
{
	const char *quiet = getenv("TICKBUS_QUIET");
	va_list ap;

	if (quiet && quiet[0] == '1')
		return;
	va_start(ap, fmt);
	vlog("warning: ", fmt, ap);
	va_end(ap);
}

void tb_info(const char *fmt, ...)
{
	const char *verbose = getenv("TICKBUS_VERBOSE");
	va_list ap;

	if (!verbose || verbose[0] != '1')
		return;
	va_start(ap, fmt);
	vlog("", fmt, ap);
	va_end(ap);
}

const char *tb_strerror(int code)
{
	switch (code) {
	case TB_OK: return "TB_OK: success";
	case TB_BACK_PRESSURED: return "TB_BACK_PRESSURED: a subscriber has no room and the stream applies back-pressure; retry the offer";
	case TB_NOT_CONNECTED: return "TB_NOT_CONNECTED: the peer (publisher or subscriber) is not there yet";
	case TB_LAPPED: return "TB_LAPPED: this subscriber fell a whole ring behind; tb_sub_loss() gives the missing range";
	case TB_CLOSED: return "TB_CLOSED: the publisher closed the stream";
	case TB_DATA_LOSS: return "TB_DATA_LOSS: messages were lost and could not be recovered; tb_sub_loss() gives the range";
	case TB_NEW_EPOCH: return "TB_NEW_EPOCH: the publisher restarted; sequence numbers start again from 1";
	case TB_PUBLISHER_DEAD: return "TB_PUBLISHER_DEAD: the publisher stopped without closing the stream";
	case TB_GAP: return "TB_GAP: messages are missing; tb_sub_loss() gives the range";
	case TB_EVICTED: return "TB_EVICTED: the publisher dropped this subscriber (it missed its liveness reports, or its queue pair failed); it reconnects";
	case TB_EINVAL: return "TB_EINVAL: invalid argument";
	case TB_ECONFIG: return "TB_ECONFIG: invalid configuration";
	case TB_ENOMEM: return "TB_ENOMEM: out of memory";
	case TB_ESYS: return "TB_ESYS: a system call failed";
	case TB_EIO: return "TB_EIO: input/output error";
	case TB_EFORMAT: return "TB_EFORMAT: bad magic number, version or corrupt data";
	case TB_EMSGSIZE: return "TB_EMSGSIZE: message too large for the stream";
	case TB_ENOTSUP: return "TB_ENOTSUP: not supported on this build or machine";
	case TB_EBUSY: return "TB_EBUSY: resource in use";
	case TB_ETIMEDOUT: return "TB_ETIMEDOUT: timed out";
	case TB_EAUTH: return "TB_EAUTH: authentication failed";
	case TB_EPROTO: return "TB_EPROTO: malformed protocol message";
	case TB_ENOENT: return "TB_ENOENT: no such stream, file or device";
	case TB_ESTATE: return "TB_ESTATE: call not valid in the current state";
	default: return "unknown tickbus result code";
	}
}
