/*
 * tb-stat's metrics, read by a real Prometheus parser: `tb-stat
 * --prometheus` (stdout and --output FILE) and `tb-stat --listen` scraped
 * over HTTP, each parsed by Python's prometheus_client
 * (tests/metrics/parse_prom.py), whose sample lines are checked against
 * values this test put there itself: its own counters file (a stream with
 * known counters and an awkward name, a latency histogram with known
 * records) beside a real tb-publish.  The server is also fed what a
 * scraper should never send (garbage, other paths and methods, an endless
 * head, a silent client) and must answer each with its status and go on
 * serving.  Skips (77) without python3-prometheus-client.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include "bus/counters.h"
#include "tools/stat/httpd.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define PARSER "tests/metrics/parse_prom.py"

static char dir[128], ctrdir[160], ring[192];
static tb_counter_slot_t *slot, *odd;
static tb_counter_hist_t *hist;

static int setup(void **state)
{
	(void)state;
	if (access("/usr/bin/python3", X_OK) != 0 ||
	    system("/usr/bin/python3 -c 'import prometheus_client' "
		   ">/dev/null 2>&1") != 0) {
		printf("skip: no python3-prometheus-client (apt-get install "
		       "python3-prometheus-client)\n");
		exit(77);
	}
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-metrics") != 0)
		return -1;
	snprintf(ctrdir, sizeof(ctrdir), "%s/ctr", dir);
	if (mkdir(ctrdir, 0755) != 0)
		return -1;
	setenv("TICKBUS_COUNTERS_DIR", ctrdir, 1);
	snprintf(ring, sizeof(ring), "/dev/shm/tb-tmetrics.%d", (int)getpid());
	unlink(ring);

	/* What this process exports, for the parsed values to match. */
	slot = tb_counters_add_stream(7, "quotes", TB_ROLE_PUBLISHER, "shm");
	odd = tb_counters_add_stream(8, "we\"ird\\name", TB_ROLE_SUBSCRIBER,
				     "udp");
	hist = tb_counters_hist_add(7, TB_ROLE_SUBSCRIBER, "delivery");
	if (!slot || !odd || !hist)
		return -1;
	tb_counter_add(slot, TB_CTR_PUBLISHED, 12345);
	tb_counter_add(slot, TB_CTR_GAPS, 2);
	tb_counter_add(odd, TB_CTR_DELIVERED, 99);
	tb_counter_hist_record(hist, 50);
	tb_counter_hist_record(hist, 1000);
	tb_counter_hist_record(hist, 1000);
	tb_counter_hist_record(hist, 3000000000ll);
	tb_counters_heartbeat();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tb_counters_remove_stream(slot);
	tb_counters_remove_stream(odd);
	tb_counters_hist_remove(hist);
	tb_counters_close();
	return scenario_cleanup(dir, ring);
}

/* Parses `file` with the real parser; its sample lines (malloc'd). */
static char *parse(const char *file)
{
	char cmd[512], path[256], *out;
	proc_t p;
	int rc;

	snprintf(path, sizeof(path), "%s/parsed.out", dir);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 " PARSER " %s >%s 2>&1",
		 file, path);
	rc = system(cmd);
	snprintf(p.out, sizeof(p.out), "%s", path);
	out = proc_output(&p);
	if (rc != 0)
		fail_msg("the parser refused %s: %s", file, out);
	return out;
}

static void expect_line(const char *parsed, const char *line)
{
	char want[1024];

	snprintf(want, sizeof(want), "\n%s\n", line);
	if (!strstr(parsed, want) && strncmp(parsed, want + 1, strlen(want + 1)))
		fail_msg("no line '%s' in:\n%s", line, parsed);
}

/* The labels of this process's samples, as the parser prints them. */
static void mine(char *buf, size_t len, const char *more)
{
	snprintf(buf, len, "pid=\"%d\",process=\"test_tools_metrics\",%s",
		 (int)getpid(), more);
}

static void check_own_values(const char *parsed)
{
	char l[512], line[1024];

	mine(l, sizeof(l), "role=\"publisher\",stream=\"quotes\","
	     "stream_id=\"7\",transport=\"shm\"");
	snprintf(line, sizeof(line), "tickbus_published counter "
		 "tickbus_published_total{%s} 12345.0", l);
	expect_line(parsed, line);
	snprintf(line, sizeof(line), "tickbus_gaps counter "
		 "tickbus_gaps_total{%s} 2.0", l);
	expect_line(parsed, line);
	/* The name with a quote and a backslash comes back whole. */
	mine(l, sizeof(l), "role=\"subscriber\",stream=\"we\"ird\\name\","
	     "stream_id=\"8\",transport=\"udp\"");
	snprintf(line, sizeof(line), "tickbus_delivered counter "
		 "tickbus_delivered_total{%s} 99.0", l);
	expect_line(parsed, line);

	/* The histogram: 50 ns, 1000 ns twice, 3 s; cumulative buckets. */
	static const struct { const char *le; double n; } b[] = {
		{"0.000000064", 1}, {"0.000000512", 1}, {"0.000001024", 3},
		{"2.147483648", 3}, {"4.294967296", 4}, {"+Inf", 4},
	};
	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++) {
		char more[128];

		snprintf(more, sizeof(more), "role=\"subscriber\",stream=\"\","
			 "stream_id=\"7\",transport=\"\"");
		snprintf(line, sizeof(line), "tickbus_latency_seconds histogram "
			 "tickbus_latency_seconds_bucket{le=\"%s\",name="
			 "\"delivery\",pid=\"%d\",process=\"test_tools_metrics"
			 "\",%s} %.1f", b[i].le, (int)getpid(), more, b[i].n);
		expect_line(parsed, line);
	}
	snprintf(line, sizeof(line), "tickbus_latency_seconds histogram "
		 "tickbus_latency_seconds_count{name=\"delivery\",pid=\"%d\","
		 "process=\"test_tools_metrics\",role=\"subscriber\",stream="
		 "\"\",stream_id=\"7\",transport=\"\"} 4.0", (int)getpid());
	expect_line(parsed, line);
	snprintf(line, sizeof(line), "tickbus_latency_seconds histogram "
		 "tickbus_latency_seconds_sum{name=\"delivery\",pid=\"%d\","
		 "process=\"test_tools_metrics\",role=\"subscriber\",stream="
		 "\"\",stream_id=\"7\",transport=\"\"} 3.00000205",
		 (int)getpid());
	expect_line(parsed, line);
}

/* The publisher's published count, parsed (0 if absent). */
static double pub_published(const char *parsed, pid_t pid)
{
	char key[128];
	const char *p;

	snprintf(key, sizeof(key), "tickbus_published_total{pid=\"%d\",",
		 (int)pid);
	p = strstr(parsed, key);
	if (!p)
		return 0;
	p = strchr(p, '}');
	return p ? atof(p + 2) : 0;
}

static void start_pub(proc_t *pub)
{
	char out[256];
	char *argv[] = {"tb-publish", "--shm", ring, "--count", "1000000",
			"--rate", "2000", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(pub, out, argv), 0);
}

static void test_prometheus_text(void **state)
{
	char path[256], file[256], *text, *parsed;
	proc_t pub;
	double published = 0;
	(void)state;

	start_pub(&pub);
	snprintf(path, sizeof(path), "%s/prom.out", dir);
	for (uint64_t until = proc_now_ms() + 30000; published == 0;) {
		char *a[] = {"--prometheus", NULL};

		assert_int_equal(scenario_run_tool("tb-stat", path, a, 60000,
						   &text), 0);
		free(text);
		parsed = parse(path);
		published = pub_published(parsed, pub.pid);
		if (published == 0) {
			assert_true(proc_now_ms() < until);
			free(parsed);
			usleep(100000);
		}
	}
	check_own_values(parsed);
	assert_true(published > 0);
	free(parsed);

	/* --output: the file, written whole, and nothing on stdout. */
	snprintf(file, sizeof(file), "%s/textfile/tickbus.prom", dir);
	{
		char d[256];

		snprintf(d, sizeof(d), "%s/textfile", dir);
		assert_int_equal(mkdir(d, 0755), 0);
	}
	{
		char *a[] = {"--prometheus", "--output", file, NULL};

		assert_int_equal(scenario_run_tool("tb-stat", path, a, 60000,
						   &text), 0);
		assert_string_equal(text, "");
		free(text);
	}
	parsed = parse(file);
	check_own_values(parsed);
	free(parsed);
	kill(pub.pid, SIGKILL);
	proc_wait(&pub, 10000);
}

/* ------------------------------------------------------------- HTTP */

static int dial(unsigned port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends `req` (`len` bytes) and reads the answer until the server closes
 * (at most 10 s); malloc'd. */
static char *exchange(unsigned port, const char *req, size_t len)
{
	size_t cap = 1 << 20, have = 0;
	char *buf = malloc(cap + 1);
	uint64_t until = proc_now_ms() + 10000;
	int fd = dial(port);

	assert_non_null(buf);
	assert_true(fd >= 0);
	if (len)
		assert_int_equal(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	while (have < cap && proc_now_ms() < until) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = recv(fd, buf + have, cap - have, 0);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(fd);
	buf[have] = '\0';
	return buf;
}

static void expect_status(unsigned port, const char *req, size_t len,
			  const char *status)
{
	char *a = exchange(port, req, len);

	if (strncmp(a, status, strlen(status)))
		fail_msg("sent %.40s...: expected '%s', got '%.80s'", req,
			 status, a);
	free(a);
}

static void test_listen_serves_and_refuses(void **state)
{
	unsigned port = proc_free_port();
	char addr[64], out[256], body[256], *a, *parsed;
	proc_t stat;
	FILE *f;
	(void)state;

	assert_true(port > 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	snprintf(out, sizeof(out), "%s/listen.out", dir);
	{
		char *argv[] = {"tb-stat", "--listen", addr, NULL};

		assert_int_equal(proc_start(&stat, out, argv), 0);
	}
	assert_int_equal(proc_wait_output(&stat, "serving http://", 20000), 0);

	/* A real scrape, parsed. */
	a = exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
		     "Accept: text/plain\r\n\r\n", 55);
	assert_true(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(a, "Content-Type: text/plain; version=0.0.4"));
	assert_non_null(strstr(a, "\r\n\r\n"));
	snprintf(body, sizeof(body), "%s/scrape.txt", dir);
	f = fopen(body, "w");
	assert_non_null(f);
	fputs(strstr(a, "\r\n\r\n") + 4, f);
	fclose(f);
	free(a);
	parsed = parse(body);
	check_own_values(parsed);
	free(parsed);

	/* What a scraper should never send. */
	expect_status(port, "GET /other HTTP/1.1\r\n\r\n", 24,
		      "HTTP/1.1 404 ");
	expect_status(port, "POST /metrics HTTP/1.1\r\n\r\n", 26,
		      "HTTP/1.1 405 ");
	expect_status(port, "GET /metrics SPDY/3\r\n\r\n", 23,
		      "HTTP/1.1 400 ");
	expect_status(port, "GET /metrics HTTP/2.0\r\n\r\n", 25,
		      "HTTP/1.1 505 ");
	expect_status(port, "\x01\x02\xff garbage\n\n", 13, "HTTP/1.1 400 ");
	expect_status(port, "GET metrics HTTP/1.1\r\n\r\n", 24,
		      "HTTP/1.1 400 ");
	{
		static char big[TB_STAT_HTTPD_HEAD_MAX + 100];

		memset(big, 'a', sizeof(big));
		memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
		expect_status(port, big, sizeof(big), "HTTP/1.1 431 ");
	}
	/* HEAD: the headers alone. */
	a = exchange(port, "HEAD /metrics?x=1 HTTP/1.0\n\n", 28);
	assert_true(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_null(strstr(a, "tickbus_"));
	free(a);

	/* A client that connects and says nothing is dropped at the
	 * deadline; the next scrape is served. */
	{
		int quiet = dial(port);
		uint64_t t0 = proc_now_ms();

		assert_true(quiet >= 0);
		a = exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", 25);
		assert_true(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
		assert_true(proc_now_ms() - t0 < 9000);
		free(a);
		close(quiet);
	}

	kill(stat.pid, SIGTERM);
	assert_int_equal(proc_wait(&stat, 10000), 0);
}

/* The request-line parser alone. */
static void test_classify(void **state)
{
	static const struct { const char *head; int status, head_only; } c[] = {
		{"GET /metrics HTTP/1.1\r\n\r\n", 200, 0},
		{"GET /metrics?name[]=x HTTP/1.0\n\n", 200, 0},
		{"HEAD /metrics HTTP/1.1\r\n\r\n", 200, 1},
		{"GET /metricsX HTTP/1.1\r\n\r\n", 404, 0},
		{"GET / HTTP/1.1\r\n\r\n", 404, 0},
		{"PUT /metrics HTTP/1.1\r\n\r\n", 405, 0},
		{"GET  /metrics HTTP/1.1\r\n\r\n", 400, 0},
		{" GET /metrics HTTP/1.1\r\n\r\n", 400, 0},
		{"GET /metrics\r\n\r\n", 400, 0},
		{"GET /metrics HTTP/1.1 x\r\n\r\n", 400, 0},
		{"GET /metrics HTTP/3.0\r\n\r\n", 505, 0},
		{"GET /metrics HTTP/1.1\r\nX: \x7f\r\n\r\n", 400, 0},
		{"\r\n\r\n", 400, 0},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int head_only = -1;
		int s = tb_stat_httpd_classify(c[i].head, strlen(c[i].head),
					       &head_only);

		if (s != c[i].status)
			fail_msg("'%s': %d, expected %d", c[i].head, s,
				 c[i].status);
		if (s == 200)
			assert_int_equal(head_only, c[i].head_only);
	}
}

static void expect(char *const args[], int status, const char *msg)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/stat.out", dir);
	scenario_expect_tool("tb-stat", path, args, 60000, status, msg);
}

static void test_bad_arguments(void **state)
{
	char nowhere[256];
	(void)state;

	snprintf(nowhere, sizeof(nowhere), "%s/no/such/dir/x.prom", dir);
	{ char *a[] = {"--output", "x", NULL};
	  expect(a, 2, "--output goes with --prometheus"); }
	{ char *a[] = {"--listen", "127.0.0.1:1", "--json", NULL};
	  expect(a, 2, "--listen serves the metrics itself"); }
	{ char *a[] = {"--listen", "nonsense", NULL};
	  expect(a, 2, "--listen 'nonsense'"); }
	{ char *a[] = {"--prometheus", "--output", nowhere, NULL};
	  expect(a, 1, "No such file or directory"); }
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_prometheus_text),
		cmocka_unit_test(test_listen_serves_and_refuses),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests_name("tools_metrics", tests, setup,
					   teardown);
}
