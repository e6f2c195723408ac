/*
 * httpd.h - the smallest HTTP/1.x server that a Prometheus scraper needs:
 * `tb-stat --listen ADDR` answers GET (and HEAD) /metrics with the text
 * exposition and closes the connection.
 *
 * One connection at a time, each held to a deadline that bytes do not
 * extend (TB_STAT_HTTPD_DEADLINE_MS from accept to the last byte sent), a
 * request head of at most TB_STAT_HTTPD_HEAD_MAX bytes, and a status for
 * everything else: 400 for a malformed request line, 404 for another path,
 * 405 for another method, 431 for a head too long, 505 for another
 * protocol; a client that sends nothing in time is closed without answer.
 * A scraper that stalls can delay the next scrape by one deadline, never
 * stop the service.
 */
#ifndef TB_STAT_HTTPD_H
#define TB_STAT_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TB_STAT_HTTPD_DEADLINE_MS 2000u
/* A request line and the headers a scraper sends fit in well under 1 KiB;
 * 8 KiB leaves room for proxies' headers. */
#define TB_STAT_HTTPD_HEAD_MAX 8192u

/* Writes the body of /metrics to `out`; 0, or -1 on failure (answered
 * 500). */
typedef int (*tb_stat_httpd_render_fn)(void *arg, FILE *out);

/*
 * Waits up to `wait_ms` for a connection on listener `lfd` (from
 * tb_net_listen) and serves it.  Returns 1 when one was served (whatever
 * the status), 0 when none came, or a negative TB_* code when the listener
 * failed.
 */
int tb_stat_httpd_serve_one(int lfd, uint32_t wait_ms,
			    tb_stat_httpd_render_fn render, void *arg);

/* What the server answers `head` (the bytes up to and including the blank
 * line), as a status code; for a 200, *head_only says whether the method
 * was HEAD.  Pure: the request parser, for the tests. */
int tb_stat_httpd_classify(const char *head, size_t len, int *head_only);

#endif
