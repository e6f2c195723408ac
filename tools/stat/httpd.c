/*
 * httpd.c - GET /metrics for tb-stat --listen (see httpd.h for the rules).
 *
 * The parser looks at the request line only: "METHOD SP TARGET SP
 * HTTP/1.x" with a query string allowed on the target; headers are
 * skipped (a scraper's Accept or Authorization change nothing here).
 * Every byte of the head must be printable ASCII, a tab, CR or LF.
 */
#include "tools/stat/httpd.h"

#include "bus/net.h"

#include <tickbus/tickbus.h>

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tb_stat_httpd_classify(const char *head, size_t len, int *head_only)
{
	const char *sp1, *sp2, *eol;
	size_t tlen;

	*head_only = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)head[i];

		if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') ||
		    c > 0x7e)
			return 400;
	}
	eol = memchr(head, '\n', len);
	if (!eol)
		return 400;
	if (eol > head && eol[-1] == '\r')
		eol--;
	sp1 = memchr(head, ' ', (size_t)(eol - head));
	if (!sp1 || sp1 == head)
		return 400;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return 400;
	/* "HTTP/d.d": 1.0 and 1.1 are spoken, another version is 505. */
	if ((size_t)(eol - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/", 5) ||
	    sp2[6] < '0' || sp2[6] > '9' || sp2[7] != '.' || sp2[8] < '0' ||
	    sp2[8] > '9')
		return 400;
	if (sp2[6] != '1' || (sp2[8] != '0' && sp2[8] != '1'))
		return 505;
	tlen = (size_t)(sp2 - sp1 - 1);
	if (sp1[1] != '/')
		return 400;
	{
		const char *q = memchr(sp1 + 1, '?', tlen);

		if (q)
			tlen = (size_t)(q - sp1 - 1);
	}
	if ((size_t)(sp1 - head) == 4 && !memcmp(head, "HEAD", 4))
		*head_only = 1;
	else if ((size_t)(sp1 - head) != 3 || memcmp(head, "GET", 3))
		return 405;
	if (tlen != 8 || memcmp(sp1 + 1, "/metrics", 8))
		return 404;
	return 200;
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

/* Milliseconds left until `deadline` (tb_clock_mono_ms), at least 0. */
static uint32_t left(uint64_t deadline)
{
	uint64_t now = tb_clock_mono_ms();

	return now >= deadline ? 0 : (uint32_t)(deadline - now);
}

static void answer(int fd, int status, int head_only, const char *body,
		   size_t blen, uint64_t deadline)
{
	char hdr[256];
	int n;

	if (status != 200) {
		body = reason(status);
		blen = strlen(body);
	}
	n = snprintf(hdr, sizeof(hdr),
		     "HTTP/1.1 %d %s\r\n"
		     "Content-Type: %s\r\n"
		     "Content-Length: %zu\r\n"
		     "Connection: close\r\n\r\n", status, reason(status),
		     status == 200 ? "text/plain; version=0.0.4; charset=utf-8"
				   : "text/plain; charset=utf-8", blen);
	if (tb_net_send_all(fd, hdr, (size_t)n, left(deadline)) < 0)
		return;
	if (!head_only && blen)
		tb_net_send_all(fd, body, blen, left(deadline));
}

/* Reads the request head within the deadline: its length, 0 for a client
 * that closed or went quiet, -1 for a head too long. */
static long read_head(int fd, char *buf, size_t cap, uint64_t deadline)
{
	size_t have = 0;

	while (have < cap) {
		int n = tb_net_recv_some(fd, buf + have, cap - have,
					 left(deadline));

		if (n <= 0)
			return 0;
		have += (size_t)n;
		for (size_t i = have - (size_t)n; i < have; i++) {
			/* A head ends at an empty line, CRLF or bare LF. */
			if (buf[i] != '\n' || i == 0)
				continue;
			if (buf[i - 1] == '\n' ||
			    (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n'))
				return (long)(i + 1);
		}
	}
	return -1;
}

int tb_stat_httpd_serve_one(int lfd, uint32_t wait_ms,
			    tb_stat_httpd_render_fn render, void *arg)
{
	struct pollfd pfd = {.fd = lfd, .events = POLLIN};
	static char head[TB_STAT_HTTPD_HEAD_MAX];
	uint64_t deadline;
	int fd, status, head_only = 0;
	long len;

	if (poll(&pfd, 1, (int)wait_ms) <= 0)
		return 0;
	fd = tb_net_accept(lfd, NULL, 0);
	if (fd == TB_NOT_CONNECTED)
		return 0;
	if (fd < 0)
		return fd;
	deadline = tb_clock_mono_ms() + TB_STAT_HTTPD_DEADLINE_MS;
	len = read_head(fd, head, sizeof(head), deadline);
	if (len == 0) {
		close(fd);
		return 1;
	}
	status = len < 0 ? 431 : tb_stat_httpd_classify(head, (size_t)len,
							 &head_only);
	if (status == 200) {
		char *body = NULL;
		size_t blen = 0;
		FILE *out = open_memstream(&body, &blen);

		if (!out || render(arg, out) != 0)
			status = 500;
		if (out)
			fclose(out);
		answer(fd, status, head_only, body, blen, deadline);
		free(body);
	} else {
		answer(fd, status, 0, NULL, 0, deadline);
	}
	close(fd);
	return 1;
}
