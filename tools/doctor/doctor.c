/*
 * doctor.c - tb-doctor's shared helpers: reading the host through --root,
 * command output, cpu lists, and collecting verdicts (see doctor.h).
 */
#include "tools/doctor/doctor.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tb_doctor_verdict_name(tb_doctor_verdict_t v)
{
	switch (v) {
	case TB_DOCTOR_OK: return "ok";
	case TB_DOCTOR_WARN: return "warn";
	case TB_DOCTOR_FAIL: return "fail";
	default: return "skipped";
	}
}

void tb_doctor_report(tb_doctor_t *d, const char *id, const char *subject,
		      tb_doctor_verdict_t v, const char *fix,
		      const char *saw_fmt, ...)
{
	tb_doctor_result_t *r;
	va_list ap;

	if (d->n_results == TB_DOCTOR_RESULTS_MAX)
		return;
	r = &d->results[d->n_results++];
	snprintf(r->id, sizeof(r->id), "%s", id);
	snprintf(r->subject, sizeof(r->subject), "%s", subject ? subject : "");
	r->verdict = v;
	va_start(ap, saw_fmt);
	vsnprintf(r->saw, sizeof(r->saw), saw_fmt, ap);
	va_end(ap);
	snprintf(r->fix, sizeof(r->fix), "%s", fix ? fix : "");
}

static int full_path(const tb_doctor_t *d, const char *path, char *out,
		     size_t len)
{
	int n = snprintf(out, len, "%s%s", d->root, path);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int tb_doctor_read(const tb_doctor_t *d, const char *path, char *buf,
		   size_t len)
{
	char p[TB_PATH_MAX * 2];
	ssize_t n = 0, got = 0;
	int fd;

	if (len == 0 || full_path(d, path, p, sizeof(p)) != 0)
		return -1;
	/* O_NONBLOCK: a FIFO planted in a fake tree must not hang us. */
	fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	while ((size_t)got < len - 1 &&
	       (n = read(fd, buf + got, len - 1 - (size_t)got)) > 0)
		got += n;
	close(fd);
	if (got == 0 && n < 0)
		return -1;
	while (got > 0 && isspace((unsigned char)buf[got - 1]))
		got--;
	buf[got] = '\0';
	return (int)got;
}

int tb_doctor_read_long(const tb_doctor_t *d, const char *path, long *v)
{
	char buf[64], *end;

	if (tb_doctor_read(d, path, buf, sizeof(buf)) <= 0)
		return -1;
	errno = 0;
	*v = strtol(buf, &end, 0);
	return errno || end == buf ? -1 : 0;
}

int tb_doctor_exists(const tb_doctor_t *d, const char *path)
{
	char p[TB_PATH_MAX * 2];
	struct stat st;

	return full_path(d, path, p, sizeof(p)) == 0 && stat(p, &st) == 0;
}

DIR *tb_doctor_opendir(const tb_doctor_t *d, const char *path)
{
	char p[TB_PATH_MAX * 2];

	return full_path(d, path, p, sizeof(p)) == 0 ? opendir(p) : NULL;
}

int tb_doctor_cmd(const tb_doctor_t *d, const char *name, const char *cmd,
		  char *buf, size_t len)
{
	char line[TB_PATH_MAX + 256];
	size_t got = 0;
	FILE *f;

	if (d->root[0]) {
		snprintf(line, sizeof(line), "/cmd/%s", name);
		return tb_doctor_read(d, line, buf, len);
	}
	snprintf(line, sizeof(line), "( %s ) 2>/dev/null", cmd);
	f = popen(line, "r");
	if (!f)
		return -1;
	got = fread(buf, 1, len - 1, f);
	buf[got] = '\0';
	if (pclose(f) != 0 || got == 0)
		return -1;
	return (int)got;
}

int tb_doctor_cpulist(const char *s, uint64_t set[16])
{
	memset(set, 0, 16 * sizeof(uint64_t));
	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b = a;

		if (end == s || a < 0 || a > 1023)
			return -1;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			if (end == s + 1 || b < a || b > 1023)
				return -1;
			s = end;
		}
		for (long c = a; c <= b; c++)
			set[c / 64] |= 1ull << (c % 64);
		if (*s == ',')
			s++;
		else if (*s && *s != '\n')
			return -1;
	}
	return 0;
}

int tb_doctor_stream_cores(const tb_doctor_t *d, uint64_t set[16])
{
	int n = 0;

	memset(set, 0, 16 * sizeof(uint64_t));
	for (int i = 0; i < d->n_streams; i++) {
		int c[2] = {d->streams[i]->publisher_core,
			    d->streams[i]->subscriber_core};

		for (int k = 0; k < 2; k++)
			if (c[k] >= 0 && c[k] < 1024 &&
			    !(set[c[k] / 64] & (1ull << (c[k] % 64)))) {
				set[c[k] / 64] |= 1ull << (c[k] % 64);
				n++;
			}
	}
	return n;
}

const char *tb_doctor_cpulist_str(const uint64_t set[16], char *buf,
				  size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int c = 0; c < 1024; c++) {
		int e = c;

		if (!(set[c / 64] & (1ull << (c % 64))))
			continue;
		while (e + 1 < 1024 && (set[(e + 1) / 64] & (1ull << ((e + 1) % 64))))
			e++;
		used += (size_t)snprintf(buf + used, used < len ? len - used : 0,
					 e > c ? "%s%d-%d" : "%s%d",
					 used ? "," : "", c, e);
		if (used >= len)
			break;
		c = e;
	}
	return buf;
}
