/*
 * test_config.c - stream configuration: defaults, validation of structs, and
 * INI files (bus/config.c).
 *
 * Every failing load is checked against the exact message, so each test also
 * proves that the message names the file, the line and the key.  Files are
 * written to a mkdtemp() directory that the group teardown removes.  The
 * last test loads every example in config/ (run from the repository root,
 * as tests/run-tests.sh does).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "bus/config.h"
#include <tickbus/tickbus.h>

#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/tb-test-config-XXXXXX";
static char path[128]; /* dir + "/test.ini" */
static long ncpu;

/* Allowed-value texts, as the messages spell them. */
#define A_ID "an integer from 1 to 4294967295"
#define A_RING "a power of two from 64K to 1G bytes, with an optional K, " \
	"M or G suffix (x1024)"
#define A_RCVBUF "a size from 0 to 1G bytes, with an optional K, M or G " \
	"suffix (x1024)"
#define A_EP "host:port with a port from 1 to 65535, e.g. 127.0.0.1:7000 " \
	"or [::1]:7000"
#define A_GROUP "an IPv4 multicast address (224.0.0.0 to 239.255.255.255) " \
	"and a port, e.g. 239.1.1.1:5000"
#define A_REC "up to 4 host:port endpoints separated by commas, e.g. " \
	"127.0.0.1:7100,127.0.0.1:7101"
#define A_TOKEN "1 to 127 printable ASCII characters, no spaces"
#define A_NAME63 "1 to 63 printable ASCII characters, no spaces"

static int group_setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/test.ini", dir);
	ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (ncpu < 1)
		ncpu = 1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	unlink(path);
	return rmdir(dir);
}

static void write_file(const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static tb_config_t *load_ok(const char *text)
{
	tb_config_t *cfg = NULL;
	int rc;

	write_file(text, strlen(text));
	rc = tb_config_load(&cfg, path);
	if (rc != 0)
		fail_msg("load failed (%d): %s", rc, tb_errmsg());
	assert_non_null(cfg);
	return cfg;
}

/* Loads `len` bytes of `text` and expects TB_ECONFIG with the message
 * "<path><tail>". */
static void expect_error_n(const char *text, size_t len, const char *tail)
{
	tb_config_t *cfg = (tb_config_t *)&cfg;
	char want[2048];

	write_file(text, len);
	assert_int_equal(tb_config_load(&cfg, path), TB_ECONFIG);
	assert_null(cfg);
	snprintf(want, sizeof(want), "%s%s", path, tail);
	assert_string_equal(tb_errmsg(), want);
}

static void expect_error(const char *text, const char *tail)
{
	expect_error_n(text, strlen(text), tail);
}

/* A one-stream file in which `key = value` is line 3:
 *   1 [stream s]   2 transport = T   3 key = value   4 id = 1   5 (required)
 * and the expected message is "<path>:3: key '<key>': <what>". */
struct bad_case {
	const char *transport;
	const char *key;
	const char *value;
	const char *what;
};

static void expect_bad_key(const struct bad_case *c)
{
	char text[1024], tail[1536];
	int n;

	n = snprintf(text, sizeof(text), "[stream s]\ntransport = %s\n"
		     "%s = %s\n", c->transport, c->key, c->value);
	if (strcmp(c->key, "id") != 0)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "id = 1\n");
	if (!strcmp(c->transport, "rc") && strcmp(c->key, "control") != 0)
		snprintf(text + n, sizeof(text) - (size_t)n,
			 "control = 127.0.0.1:7000\n");
	if ((!strcmp(c->transport, "ud") || !strcmp(c->transport, "udp")) &&
	    strcmp(c->key, "group") != 0)
		snprintf(text + n, sizeof(text) - (size_t)n,
			 "group = 239.1.1.1:5000\n");
	snprintf(tail, sizeof(tail), ":3: key '%s': %s", c->key, c->what);
	expect_error(text, tail);
}

static void run_bad(const struct bad_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		print_message("  %s = %s\n", cases[i].key, cases[i].value);
		expect_bad_key(&cases[i]);
	}
}

#define RUN_BAD(cases) run_bad(cases, sizeof(cases) / sizeof(cases[0]))

/* ------------------------------------------------------------- structs */

static void test_defaults(void **state)
{
	tb_stream_cfg_t c;

	(void)state;
	memset(&c, 0x5a, sizeof(c));
	tb_stream_cfg_init(&c);
	assert_string_equal(c.name, "");
	assert_int_equal(c.id, 0);
	assert_int_equal(c.transport, TB_TRANSPORT_SHM);
	assert_int_equal(c.ring_size, 4 << 20);
	assert_int_equal(c.publisher_core, -1);
	assert_int_equal(c.subscriber_core, -1);
	assert_int_equal(c.idle, TB_IDLE_SPIN_YIELD);
	assert_int_equal(c.slow_consumer, TB_SLOW_LAP);
	assert_string_equal(c.token, "");
	assert_int_equal(c.n_recovery, 0);
	assert_int_equal(c.heartbeat_ms, 100);
	assert_int_equal(c.liveness_timeout_ms, 1000);
	assert_int_equal(c.retention, 0);
	assert_string_equal(c.shm_path, "");
	assert_string_equal(c.control.host, "");
	assert_int_equal(c.control.port, 0);
	assert_string_equal(c.rdma_device, "");
	assert_int_equal(c.rdma_port, 0);
	assert_int_equal(c.gid_index, -1);
	assert_int_equal(c.rdma_traffic_class, 106);
	assert_int_equal(c.rdma_timeout, 12);
	assert_int_equal(c.rdma_retry, 7);
	assert_int_equal(c.rdma_sl, 0);
	assert_string_equal(c.group.host, "");
	assert_int_equal(c.group.port, 0);
	assert_string_equal(c.interface, "");
	assert_int_equal(c.ttl, 1);
	assert_int_equal(c.loopback, 1);
	assert_int_equal(c.mtu, 0);
	assert_int_equal(c.batch_us, 0);
	assert_int_equal(c.rcvbuf, 0);
}

static void init_named(tb_stream_cfg_t *c, tb_transport_t t)
{
	tb_stream_cfg_init(c);
	strcpy(c->name, "s");
	c->id = 7;
	c->transport = t;
}

static void expect_invalid(const tb_stream_cfg_t *c, const char *msg)
{
	assert_int_equal(tb_stream_cfg_validate(c), TB_ECONFIG);
	assert_string_equal(tb_errmsg(), msg);
}

static void test_validate_struct(void **state)
{
	tb_stream_cfg_t c;
	char path_buf[TB_PATH_MAX];

	(void)state;
	assert_int_equal(tb_stream_cfg_validate(NULL), TB_EINVAL);

	init_named(&c, TB_TRANSPORT_SHM);
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	assert_int_equal(tb_stream_cfg_shm_path(&c, path_buf,
						sizeof(path_buf)), 0);
	assert_string_equal(path_buf, "/dev/shm/tickbus.s");
	strcpy(c.shm_path, "/tmp/x");
	assert_int_equal(tb_stream_cfg_shm_path(&c, path_buf,
						sizeof(path_buf)), 0);
	assert_string_equal(path_buf, "/tmp/x");

	init_named(&c, TB_TRANSPORT_SHM);
	c.name[0] = '\0';
	expect_invalid(&c, "stream name '' is invalid; allowed: 1 to 63 of "
		       "A-Z a-z 0-9 _ . -");
	strcpy(c.name, "a b");
	expect_invalid(&c, "stream name 'a b' is invalid; allowed: 1 to 63 "
		       "of A-Z a-z 0-9 _ . -");

	init_named(&c, TB_TRANSPORT_SHM);
	c.id = 0;
	expect_invalid(&c, "stream 's': missing required field 'id'");

	init_named(&c, TB_TRANSPORT_SHM);
	c.transport = (tb_transport_t)7;
	expect_invalid(&c, "stream 's': field 'transport': 7 is not a valid "
		       "transport; allowed: shm, rc, ud or udp");

	init_named(&c, TB_TRANSPORT_SHM);
	c.ring_size = 96 << 10;
	expect_invalid(&c, "stream 's': field 'ring_size': 98304 is not a "
		       "power of two; allowed: " A_RING);
	c.ring_size = 1000;
	expect_invalid(&c, "stream 's': field 'ring_size': 1000 is out of "
		       "range; allowed: " A_RING);

	init_named(&c, TB_TRANSPORT_SHM);
	c.heartbeat_ms = 0;
	expect_invalid(&c, "stream 's': field 'heartbeat_ms': 0 is out of "
		       "range; allowed: an integer from 1 to 60000");

	init_named(&c, TB_TRANSPORT_SHM);
	c.heartbeat_ms = 600;
	expect_invalid(&c, "stream 's': field 'liveness_timeout_ms': 1000 is "
		       "less than twice heartbeat_ms (600); allowed: at least "
		       "1200");

	init_named(&c, TB_TRANSPORT_SHM);
	strcpy(c.token, "a b");
	expect_invalid(&c, "stream 's': field 'token': the value contains a "
		       "space or a character that is not printable ASCII; "
		       "allowed: " A_TOKEN);

	init_named(&c, TB_TRANSPORT_SHM);
	strcpy(c.shm_path, "rel");
	expect_invalid(&c, "stream 's': field 'shm_path': the value is not an "
		       "absolute path; allowed: an absolute path of at most 255 "
		       "characters");

	init_named(&c, TB_TRANSPORT_RC);
	expect_invalid(&c, "stream 's': missing required field 'control' for "
		       "transport rc");
	strcpy(c.control.host, "127.0.0.1");
	c.control.port = 7000;
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	c.control.port = 0;
	expect_invalid(&c, "stream 's': field 'control': '127.0.0.1:0': port 0 "
		       "is out of range; allowed: " A_EP);

	init_named(&c, TB_TRANSPORT_UD);
	expect_invalid(&c, "stream 's': missing required field 'group' for "
		       "transport ud");
	strcpy(c.group.host, "10.1.1.1");
	c.group.port = 5000;
	expect_invalid(&c, "stream 's': field 'group': '10.1.1.1:5000': "
		       "'10.1.1.1' is not a multicast address; allowed: "
		       A_GROUP);
	strcpy(c.group.host, "239.1.1.1");
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	c.loopback = 2;
	expect_invalid(&c, "stream 's': field 'loopback': 2 is not a valid "
		       "value; allowed: yes, no, true, false, 1 or 0");

	init_named(&c, TB_TRANSPORT_SHM);
	c.n_recovery = TB_RECOVERY_MAX + 1;
	expect_invalid(&c, "stream 's': field 'recovery': n_recovery 5 is out "
		       "of range; allowed: " A_REC);
	c.n_recovery = 1;
	expect_invalid(&c, "stream 's': field 'recovery': entry 1 has an empty "
		       "host; allowed: " A_REC);
	strcpy(c.recovery[0].host, "127.0.0.1");
	c.recovery[0].port = 7100;
	expect_invalid(&c, "stream 's': field 'token' is missing; recovery and "
		       "retention_endpoint need it (the recovery protocol "
		       "authenticates every request)");
	strcpy(c.token, "t0ken");
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
}

/* The recovery keys of issue 5: retention_endpoint, recovery_buffer,
 * recovery_timeout_ms, and the rules that tie them to token and retention. */
static void test_recovery_keys(void **state)
{
	static const struct bad_case bad[] = {
		{"shm", "recovery_buffer", "100K", "'100K' is not a power of "
		 "two; allowed: a power of two from 64K to 1G bytes, with an "
		 "optional K, M or G suffix (x1024)"},
		{"shm", "recovery_timeout_ms", "99", "'99' is out of range; "
		 "allowed: an integer from 100 to 600000"},
		{"udp", "retention_endpoint", "127.0.0.1:0", "'127.0.0.1:0': "
		 "port 0 is out of range; allowed: host:port with a port from "
		 "1 to 65535, e.g. 127.0.0.1:7000 or [::1]:7000"},
	};
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;
	tb_stream_cfg_t c;

	(void)state;
	init_named(&c, TB_TRANSPORT_SHM);
	assert_true(c.recovery_buffer == (4u << 20));
	assert_int_equal(c.recovery_timeout_ms, 5000);
	cfg = load_ok("[stream s]\nid = 1\ntransport = shm\n"
		      "token = abc\nretention = 1000\n"
		      "retention_endpoint = 127.0.0.1:7200\n"
		      "recovery_buffer = 1M\nrecovery_timeout_ms = 250\n");
	s = tb_config_stream(cfg, "s");
	assert_non_null(s);
	assert_string_equal(s->retention_endpoint.host, "127.0.0.1");
	assert_int_equal(s->retention_endpoint.port, 7200);
	assert_true(s->recovery_buffer == (1u << 20));
	assert_int_equal(s->recovery_timeout_ms, 250);
	tb_config_free(cfg);

	c.retention = 10;
	strcpy(c.retention_endpoint.host, "127.0.0.1");
	c.retention_endpoint.port = 7200;
	expect_invalid(&c, "stream 's': field 'token' is missing; recovery and "
		       "retention_endpoint need it (the recovery protocol "
		       "authenticates every request)");
	strcpy(c.token, "abc");
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	c.retention = 0;
	expect_invalid(&c, "stream 's': field 'retention_endpoint' is set but "
		       "retention is 0; allowed: retention 1..100000000 with it");
	RUN_BAD(bad);
}

static void test_validate_core_count(void **state)
{
	tb_stream_cfg_t c;
	char want[256];

	(void)state;
	init_named(&c, TB_TRANSPORT_SHM);
	c.subscriber_core = (int)ncpu - 1;
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	c.subscriber_core = (int)ncpu;
	snprintf(want, sizeof(want), "stream 's': field 'subscriber_core': %ld "
		 "is not a CPU of this machine (it has %ld); allowed: a CPU "
		 "number from 0 to %ld, or none", ncpu, ncpu, ncpu - 1);
	expect_invalid(&c, want);
	c.subscriber_core = -2;
	snprintf(want, sizeof(want), "stream 's': field 'subscriber_core': -2 "
		 "is not a CPU of this machine (it has %ld); allowed: a CPU "
		 "number from 0 to %ld, or none", ncpu, ncpu - 1);
	expect_invalid(&c, want);
}

static void test_endpoint_parse(void **state)
{
	tb_endpoint_t ep;

	(void)state;
	assert_int_equal(tb_config_endpoint_parse(&ep, "127.0.0.1:7000"), 0);
	assert_string_equal(ep.host, "127.0.0.1");
	assert_int_equal(ep.port, 7000);
	assert_int_equal(tb_config_endpoint_parse(&ep, "[::1]:65535"), 0);
	assert_string_equal(ep.host, "::1");
	assert_int_equal(ep.port, 65535);
	assert_int_equal(tb_config_endpoint_parse(&ep, "feed-a.local:1"), 0);
	assert_string_equal(ep.host, "feed-a.local");
	assert_int_equal(tb_config_endpoint_parse(&ep, "host:65536"),
			 TB_ECONFIG);
	assert_string_equal(tb_errmsg(), "'host:65536': port 65536 is out of "
			    "range; allowed: " A_EP);
	assert_string_equal(tb_config_transport_name(TB_TRANSPORT_UDP), "udp");
	assert_string_equal(tb_config_transport_name((tb_transport_t)9), "?");
}

/* -------------------------------------------------------- valid files */

static void test_minimal_file_takes_defaults(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;
	tb_stream_cfg_t d;

	(void)state;
	cfg = load_ok("[stream quotes]\nid = 1\ntransport = shm\n");
	assert_int_equal(tb_config_stream_count(cfg), 1);
	s = tb_config_stream_at(cfg, 0);
	assert_non_null(s);
	tb_stream_cfg_init(&d);
	strcpy(d.name, "quotes");
	d.id = 1;
	strcpy(d.shm_path, "/dev/shm/tickbus.quotes");
	assert_memory_equal(s, &d, sizeof(d));
	tb_config_free(cfg);
}

static void test_shm_full(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;

	(void)state;
	cfg = load_ok("[stream quotes.L1-a_b]\n"
		      "id = 4294967295\n"
		      "transport = shm\n"
		      "ring_size = 1G\n"
		      "publisher_core = 0\n"
		      "subscriber_core = none\n"
		      "idle = busy-spin\n"
		      "slow_consumer = backpressure\n"
		      "token = s3cr3t!#$%&()*+,-./:<=>?@[]^_`{|}~\n"
		      "recovery = 127.0.0.1:7100, rec-b.example:7101 ,[::1]:7102,10.0.0.4:65535\n"
		      "heartbeat_ms = 60000\n"
		      "liveness_timeout_ms = 600000\n"
		      "retention = 100000000\n"
		      "shm_path = /dev/shm/my ring\n");
	s = tb_config_stream(cfg, "quotes.L1-a_b");
	assert_non_null(s);
	assert_string_equal(s->name, "quotes.L1-a_b");
	assert_int_equal(s->id, UINT32_MAX);
	assert_int_equal(s->transport, TB_TRANSPORT_SHM);
	assert_true(s->ring_size == (UINT64_C(1) << 30));
	assert_int_equal(s->publisher_core, 0);
	assert_int_equal(s->subscriber_core, -1);
	assert_int_equal(s->idle, TB_IDLE_BUSY_SPIN);
	assert_int_equal(s->slow_consumer, TB_SLOW_BACKPRESSURE);
	assert_string_equal(s->token, "s3cr3t!#$%&()*+,-./:<=>?@[]^_`{|}~");
	assert_int_equal(s->n_recovery, 4);
	assert_string_equal(s->recovery[0].host, "127.0.0.1");
	assert_int_equal(s->recovery[0].port, 7100);
	assert_string_equal(s->recovery[1].host, "rec-b.example");
	assert_int_equal(s->recovery[1].port, 7101);
	assert_string_equal(s->recovery[2].host, "::1");
	assert_int_equal(s->recovery[2].port, 7102);
	assert_string_equal(s->recovery[3].host, "10.0.0.4");
	assert_int_equal(s->recovery[3].port, 65535);
	assert_int_equal(s->heartbeat_ms, 60000);
	assert_int_equal(s->liveness_timeout_ms, 600000);
	assert_int_equal(s->retention, 100000000);
	assert_string_equal(s->shm_path, "/dev/shm/my ring");
	assert_int_equal(tb_stream_cfg_validate(s), 0);
	tb_config_free(cfg);
}

static void test_rc_full(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;

	(void)state;
	cfg = load_ok("[stream book]\n"
		      "id = 10\n"
		      "transport = rc\n"
		      "control = [fe80::1]:7000\n"
		      "token = tok\n"
		      "ring_size = 64K\n"
		      "rdma_device = mlx5_0\n"
		      "rdma_port = 255\n"
		      "gid_index = 3\n"
		      "rdma_traffic_class = 0\n"
		      "rdma_timeout = 31\n"
		      "rdma_retry = 0\n"
		      "rdma_sl = 15\n"
		      "publisher_core = none\n"
		      "subscriber_core = 0\n"
		      "idle = backoff\n"
		      "slow_consumer = lap\n"
		      "heartbeat_ms = 1\n"
		      "liveness_timeout_ms = 2\n"
		      "retention = 0\n"
		      "recovery = 127.0.0.1:7100\n");
	s = tb_config_stream(cfg, "book");
	assert_non_null(s);
	assert_int_equal(s->id, 10);
	assert_int_equal(s->transport, TB_TRANSPORT_RC);
	assert_string_equal(s->control.host, "fe80::1");
	assert_int_equal(s->control.port, 7000);
	assert_string_equal(s->token, "tok");
	assert_int_equal(s->ring_size, 64 << 10);
	assert_string_equal(s->rdma_device, "mlx5_0");
	assert_int_equal(s->rdma_port, 255);
	assert_int_equal(s->gid_index, 3);
	assert_int_equal(s->rdma_traffic_class, 0);
	assert_int_equal(s->rdma_timeout, 31);
	assert_int_equal(s->rdma_retry, 0);
	assert_int_equal(s->rdma_sl, 15);
	assert_int_equal(s->publisher_core, -1);
	assert_int_equal(s->subscriber_core, 0);
	assert_int_equal(s->idle, TB_IDLE_BACKOFF);
	assert_int_equal(s->slow_consumer, TB_SLOW_LAP);
	assert_int_equal(s->heartbeat_ms, 1);
	assert_int_equal(s->liveness_timeout_ms, 2);
	assert_int_equal(s->retention, 0);
	assert_int_equal(s->n_recovery, 1);
	assert_string_equal(s->recovery[0].host, "127.0.0.1");
	assert_int_equal(s->recovery[0].port, 7100);
	/* shm_path is for shm streams only: no default is filled */
	assert_string_equal(s->shm_path, "");
	assert_int_equal(tb_stream_cfg_validate(s), 0);
	tb_config_free(cfg);
}

static void test_ud_full(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;

	(void)state;
	cfg = load_ok("[stream trades]\n"
		      "id = 20\n"
		      "transport = ud\n"
		      "group = 239.192.0.20:5020\n"
		      "interface = 127.0.0.1\n"
		      "ttl = 0\n"
		      "loopback = no\n"
		      "mtu = 4096\n"
		      "batch_us = 1000000\n"
		      "rdma_device = softrdma0\n"
		      "rdma_port = 1\n"
		      "gid_index = -1\n"
		      "control = 127.0.0.1:7020\n"
		      "ring_size = 2m\n"
		      "heartbeat_ms = 50\n"
		      "liveness_timeout_ms = 100\n"
		      "retention = 12345\n");
	s = tb_config_stream(cfg, "trades");
	assert_non_null(s);
	assert_int_equal(s->transport, TB_TRANSPORT_UD);
	assert_string_equal(s->group.host, "239.192.0.20");
	assert_int_equal(s->group.port, 5020);
	assert_string_equal(s->interface, "127.0.0.1");
	assert_int_equal(s->ttl, 0);
	assert_int_equal(s->loopback, 0);
	assert_int_equal(s->mtu, 4096);
	assert_int_equal(s->batch_us, 1000000);
	assert_string_equal(s->rdma_device, "softrdma0");
	assert_int_equal(s->rdma_port, 1);
	assert_int_equal(s->gid_index, -1);
	assert_string_equal(s->control.host, "127.0.0.1");
	assert_int_equal(s->control.port, 7020);
	assert_int_equal(s->ring_size, 2 << 20);
	assert_int_equal(s->heartbeat_ms, 50);
	assert_int_equal(s->liveness_timeout_ms, 100);
	assert_int_equal(s->retention, 12345);
	assert_int_equal(tb_stream_cfg_validate(s), 0);
	tb_config_free(cfg);
}

static void test_udp_full(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;

	(void)state;
	cfg = load_ok("[stream trades]\n"
		      "id = 30\n"
		      "transport = UDP\n"
		      "group = 224.0.0.1:1\n"
		      "interface = eth0\n"
		      "ttl = 255\n"
		      "loopback = TRUE\n"
		      "mtu = 65507\n"
		      "batch_us = 0\n"
		      "rcvbuf = 1G\n"
		      "idle = Spin-Then-Yield\n"
		      "token = t\n");
	s = tb_config_stream(cfg, "trades");
	assert_non_null(s);
	assert_int_equal(s->transport, TB_TRANSPORT_UDP);
	assert_string_equal(s->group.host, "224.0.0.1");
	assert_int_equal(s->group.port, 1);
	assert_string_equal(s->interface, "eth0");
	assert_int_equal(s->ttl, 255);
	assert_int_equal(s->loopback, 1);
	assert_int_equal(s->mtu, 65507);
	assert_int_equal(s->batch_us, 0);
	assert_int_equal(s->rcvbuf, 1u << 30);
	assert_int_equal(s->idle, TB_IDLE_SPIN_YIELD);
	assert_int_equal(tb_stream_cfg_validate(s), 0);
	tb_config_free(cfg);

	/* the other spellings of a boolean, and the other end of the ranges */
	cfg = load_ok("[stream a]\nid = 1\ntransport = udp\n"
		      "group = 239.255.255.255:65535\nloopback = 0\n"
		      "mtu = 256\nrcvbuf = 0\n"
		      "[stream b]\nid = 2\ntransport = udp\n"
		      "group = 239.0.0.1:2\nloopback = false\nmtu = 0\n"
		      "[stream c]\nid = 3\ntransport = udp\n"
		      "group = 239.0.0.1:3\nloopback = 1\n"
		      "[stream d]\nid = 4\ntransport = udp\n"
		      "group = 239.0.0.1:4\nloopback = yes\n");
	assert_int_equal(tb_config_stream(cfg, "a")->loopback, 0);
	assert_int_equal(tb_config_stream(cfg, "a")->mtu, 256);
	assert_int_equal(tb_config_stream(cfg, "b")->loopback, 0);
	assert_int_equal(tb_config_stream(cfg, "c")->loopback, 1);
	assert_int_equal(tb_config_stream(cfg, "d")->loopback, 1);
	tb_config_free(cfg);
}

static void test_several_streams_and_lookup(void **state)
{
	tb_config_t *cfg;
	const tb_stream_cfg_t *s;

	(void)state;
	cfg = load_ok("[stream a]\nid = 1\ntransport = shm\n"
		      "[stream b]\nid = 2\ntransport = udp\n"
		      "group = 239.1.1.1:5000\n"
		      "[stream c]\nid = 3\ntransport = rc\n"
		      "control = localhost:7000\n");
	assert_int_equal(tb_config_stream_count(cfg), 3);
	assert_string_equal(tb_config_stream_at(cfg, 0)->name, "a");
	assert_string_equal(tb_config_stream_at(cfg, 1)->name, "b");
	assert_string_equal(tb_config_stream_at(cfg, 2)->name, "c");
	assert_int_equal(tb_config_stream(cfg, "c")->id, 3);

	assert_null(tb_config_stream_at(cfg, 3));
	assert_string_equal(tb_errmsg(), "tb_config_stream_at: index 3 is out "
			    "of range (3 streams)");
	assert_null(tb_config_stream_at(cfg, -1));
	s = tb_config_stream(cfg, "nope");
	assert_null(s);
	{
		char want[PATH_MAX + 64];

		snprintf(want, sizeof(want), "%s: no stream 'nope'; the file "
			 "has: a, b, c", path);
		assert_string_equal(tb_errmsg(), want);
	}
	assert_int_equal(tb_config_stream_count(NULL), 0);
	tb_config_free(cfg);
	tb_config_free(NULL);
}

/* tb_config_load_stream (what both *_open_file calls use): one stream's
 * struct copied out, the file's errors and the missing stream's message as
 * tb_config_load and tb_config_stream give them. */
static void test_load_stream(void **state)
{
	static const char two[] = "[stream a]\nid = 1\ntransport = shm\n"
				  "[stream b]\nid = 2\ntransport = udp\n"
				  "group = 239.1.1.1:5000\n";
	static const char no_transport[] = "[stream a]\nid = 1\n";
	char missing[PATH_MAX + 16], want[PATH_MAX + 128];
	tb_stream_cfg_t c;

	(void)state;
	write_file(two, strlen(two));
	memset(&c, 0, sizeof(c));
	assert_int_equal(tb_config_load_stream(&c, path, "b"), 0);
	assert_string_equal(c.name, "b");
	assert_int_equal(c.id, 2);
	assert_int_equal(c.transport, TB_TRANSPORT_UDP);
	assert_int_equal(c.group.port, 5000);

	assert_int_equal(tb_config_load_stream(&c, path, "nope"), TB_ENOENT);
	snprintf(want, sizeof(want), "%s: no stream 'nope'; the file has: a, b",
		 path);
	assert_string_equal(tb_errmsg(), want);
	assert_string_equal(c.name, "b"); /* untouched on failure */

	snprintf(missing, sizeof(missing), "%s/nope.ini", dir);
	assert_int_equal(tb_config_load_stream(&c, missing, "a"), TB_ENOENT);
	snprintf(want, sizeof(want), "%s: cannot open config file: No such "
		 "file or directory", missing);
	assert_string_equal(tb_errmsg(), want);

	write_file(no_transport, strlen(no_transport));
	assert_int_equal(tb_config_load_stream(&c, path, "a"), TB_ECONFIG);
}

/* Comments, blank lines, indentation, CRLF, a BOM, inline ';' comments and
 * "key: value" all parse, and line numbers stay right through them. */
static void test_layout_and_line_numbers(void **state)
{
	static const char text[] =
		"\xEF\xBB\xBF# comment\r\n"           /* 1 */
		"; another\r\n"                        /* 2 */
		"\r\n"                                 /* 3 */
		"  [stream a]   # trailing comment\r\n" /* 4 */
		"    id = 1 ; the id\r\n"              /* 5 */
		"\ttransport: shm\r\n"                 /* 6 */
		"[ stream   b ] ; spaces inside\r\n"   /* 7 */
		"id=2\r\n"                             /* 8 */
		"transport=shm\r\n";                   /* 9 */
	tb_config_t *cfg;

	(void)state;
	cfg = load_ok(text);
	assert_int_equal(tb_config_stream_count(cfg), 2);
	assert_int_equal(tb_config_stream(cfg, "a")->id, 1);
	assert_int_equal(tb_config_stream(cfg, "b")->id, 2);
	tb_config_free(cfg);

	expect_error("\xEF\xBB\xBF# comment\r\n; another\r\n\r\n"
		     "  [stream a]\r\n    id = 1 ; the id\r\n"
		     "\ttransport: shm\r\n  ring_size = 3M  ; bad\r\n",
		     ":7: key 'ring_size': '3M' is not a power of two; "
		     "allowed: " A_RING);
}

/* An indented line is a key of its own, never inih's continuation of the
 * previous value. */
static void test_indented_line_is_not_a_continuation(void **state)
{
	tb_config_t *cfg;

	(void)state;
	cfg = load_ok("[stream a]\nid = 1\n   transport = udp\n"
		      "   group = 239.1.1.1:5000\n");
	assert_int_equal(tb_config_stream_at(cfg, 0)->transport,
			 TB_TRANSPORT_UDP);
	tb_config_free(cfg);
}

/* inih cuts section names at 50 bytes; names up to 63 must survive. */
static void test_long_stream_name(void **state)
{
	char text[256], name[64];
	tb_config_t *cfg;

	(void)state;
	memset(name, 'n', 63);
	name[63] = '\0';
	snprintf(text, sizeof(text), "[stream %s]\nid = 1\ntransport = shm\n",
		 name);
	cfg = load_ok(text);
	assert_string_equal(tb_config_stream_at(cfg, 0)->name, name);
	assert_non_null(tb_config_stream(cfg, name));
	tb_config_free(cfg);
}

/* ---------------------------------------------------------- bad values */

static void test_bad_integer(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "id", "abc", "'abc' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "12abc", "'12abc' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "0x10", "'0x10' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "+5", "'+5' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "1.5", "'1.5' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "1 2", "'1 2' is not a decimal integer; "
		 "allowed: " A_ID},
		{"shm", "id", "-", "'-' is not a decimal integer; "
		 "allowed: " A_ID},
		{"ud", "gid_index", "--1", "'--1' is not a decimal integer; "
		 "allowed: an integer from -1 to 255"},
		{"shm", "heartbeat_ms", "1e3", "'1e3' is not a decimal integer; "
		 "allowed: an integer from 1 to 60000"},
		{"shm", "id", "", "no value; allowed: " A_ID},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_integer_overflow(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "id", "99999999999999999999", "'99999999999999999999' "
		 "is too large; allowed: " A_ID},
		{"shm", "id", "9223372036854775808", "'9223372036854775808' "
		 "is too large; allowed: " A_ID},
		{"shm", "id", "4294967296", "'4294967296' is out of range; "
		 "allowed: " A_ID},
		{"shm", "retention", "18446744073709551616",
		 "'18446744073709551616' is too large; allowed: an integer "
		 "from 0 to 100000000"},
		{"shm", "ring_size", "17179869184G", "'17179869184G' is too "
		 "large; allowed: " A_RING},
		{"udp", "rcvbuf", "9007199254740992K", "'9007199254740992K' is "
		 "too large; allowed: " A_RCVBUF},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_negative_unsigned(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "id", "-1", "'-1' is negative; allowed: " A_ID},
		{"shm", "heartbeat_ms", "-100", "'-100' is negative; allowed: "
		 "an integer from 1 to 60000"},
		{"shm", "retention", "-0", "'-0' is negative; allowed: an "
		 "integer from 0 to 100000000"},
		{"shm", "ring_size", "-4M", "'-4M' is negative; allowed: "
		 A_RING},
		{"rc", "rdma_port", "-1", "'-1' is negative; allowed: an "
		 "integer from 0 to 255"},
		{"udp", "ttl", "-1", "'-1' is negative; allowed: an integer "
		 "from 0 to 255"},
		{"udp", "mtu", "-1500", "'-1500' is negative; allowed: 0 or "
		 "an integer from 256 to 65507"},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_bad_size_suffix(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "ring_size", "4X", "'4X' has an unknown suffix 'X'; "
		 "allowed: " A_RING},
		{"shm", "ring_size", "4KB", "'4KB' has an unknown suffix 'KB'; "
		 "allowed: " A_RING},
		{"shm", "ring_size", "4MiB", "'4MiB' has an unknown suffix "
		 "'MiB'; allowed: " A_RING},
		{"shm", "ring_size", "M", "'M' is not a decimal integer; "
		 "allowed: " A_RING},
		{"udp", "rcvbuf", "1T", "'1T' has an unknown suffix 'T'; "
		 "allowed: " A_RCVBUF},
		{"shm", "id", "1K", "'1K' is not a decimal integer; allowed: "
		 A_ID},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_ring_size_power_of_two_and_range(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "ring_size", "96K", "'96K' is not a power of two; "
		 "allowed: " A_RING},
		{"shm", "ring_size", "100000", "'100000' is not a power of "
		 "two; allowed: " A_RING},
		{"shm", "ring_size", "32K", "'32K' is out of range; allowed: "
		 A_RING},
		{"shm", "ring_size", "65535", "'65535' is out of range; "
		 "allowed: " A_RING},
		{"shm", "ring_size", "2G", "'2G' is out of range; allowed: "
		 A_RING},
		{"shm", "ring_size", "0", "'0' is out of range; allowed: "
		 A_RING},
		{"udp", "rcvbuf", "1025M", "'1025M' is out of range; allowed: "
		 A_RCVBUF},
	};
	tb_config_t *cfg;

	(void)state;
	RUN_BAD(cases);
	cfg = load_ok("[stream s]\nid = 1\ntransport = shm\n"
		      "ring_size = 65536\n");
	assert_int_equal(tb_config_stream_at(cfg, 0)->ring_size, 65536);
	tb_config_free(cfg);
}

static void test_integer_ranges(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "id", "0", "'0' is out of range; allowed: " A_ID},
		{"shm", "heartbeat_ms", "0", "'0' is out of range; allowed: "
		 "an integer from 1 to 60000"},
		{"shm", "heartbeat_ms", "60001", "'60001' is out of range; "
		 "allowed: an integer from 1 to 60000"},
		{"shm", "liveness_timeout_ms", "1", "'1' is out of range; "
		 "allowed: an integer from 2 to 600000, and at least twice "
		 "heartbeat_ms"},
		{"shm", "liveness_timeout_ms", "600001", "'600001' is out of "
		 "range; allowed: an integer from 2 to 600000, and at least "
		 "twice heartbeat_ms"},
		{"shm", "retention", "100000001", "'100000001' is out of range; "
		 "allowed: an integer from 0 to 100000000"},
		{"rc", "rdma_port", "256", "'256' is out of range; allowed: an "
		 "integer from 0 to 255"},
		{"rc", "gid_index", "-2", "'-2' is out of range; allowed: an "
		 "integer from -1 to 255"},
		{"ud", "gid_index", "256", "'256' is out of range; allowed: an "
		 "integer from -1 to 255"},
		{"rc", "rdma_traffic_class", "256", "'256' is out of range; "
		 "allowed: an integer from 0 to 255"},
		{"rc", "rdma_timeout", "0", "'0' is out of range; allowed: an "
		 "integer from 1 to 31"},
		{"rc", "rdma_timeout", "32", "'32' is out of range; allowed: an "
		 "integer from 1 to 31"},
		{"rc", "rdma_retry", "8", "'8' is out of range; allowed: an "
		 "integer from 0 to 7"},
		{"rc", "rdma_sl", "16", "'16' is out of range; allowed: an "
		 "integer from 0 to 15"},
		{"udp", "ttl", "256", "'256' is out of range; allowed: an "
		 "integer from 0 to 255"},
		{"udp", "mtu", "255", "'255' is out of range; allowed: 0 or an "
		 "integer from 256 to 65507"},
		{"ud", "mtu", "65508", "'65508' is out of range; allowed: 0 or "
		 "an integer from 256 to 65507"},
		{"udp", "batch_us", "1000001", "'1000001' is out of range; "
		 "allowed: an integer from 0 to 1000000"},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_liveness_at_least_twice_heartbeat(void **state)
{
	tb_config_t *cfg;

	(void)state;
	/* liveness given: it is the key at fault */
	expect_error("[stream s]\nid = 1\ntransport = shm\n"
		     "heartbeat_ms = 100\nliveness_timeout_ms = 199\n",
		     ":5: key 'liveness_timeout_ms': 199 is less than twice "
		     "heartbeat_ms (100); allowed: at least 200 and at most "
		     "600000");
	/* only heartbeat given: the default liveness is too short for it */
	expect_error("[stream s]\nid = 1\nheartbeat_ms = 600\n"
		     "transport = shm\n",
		     ":3: key 'heartbeat_ms': 600 needs liveness_timeout_ms of "
		     "at least 1200 but it is 1000 (the default); set "
		     "liveness_timeout_ms too");
	/* exactly twice is fine, in either order */
	cfg = load_ok("[stream s]\nliveness_timeout_ms = 1200\nid = 1\n"
		      "transport = shm\nheartbeat_ms = 600\n");
	assert_int_equal(tb_config_stream_at(cfg, 0)->liveness_timeout_ms,
			 1200);
	tb_config_free(cfg);
}

static void test_bad_core(void **state)
{
	char cpu[32], what[256];
	struct bad_case c = {"shm", "publisher_core", cpu, what};
	const char *allowed_fmt = "a CPU number from 0 to %ld, or none";
	char allowed[128];
	tb_config_t *cfg;

	(void)state;
	snprintf(allowed, sizeof(allowed), allowed_fmt, ncpu - 1);

	snprintf(cpu, sizeof(cpu), "%ld", ncpu);
	snprintf(what, sizeof(what), "'%ld' is not a CPU of this machine (it "
		 "has %ld); allowed: %s", ncpu, ncpu, allowed);
	expect_bad_key(&c);

	c.key = "subscriber_core";
	snprintf(cpu, sizeof(cpu), "-1");
	snprintf(what, sizeof(what), "'-1' is negative; allowed: %s", allowed);
	expect_bad_key(&c);

	snprintf(cpu, sizeof(cpu), "all");
	snprintf(what, sizeof(what), "'all' is not a decimal integer; "
		 "allowed: %s", allowed);
	expect_bad_key(&c);

	cfg = load_ok("[stream s]\nid = 1\ntransport = shm\n"
		      "publisher_core = 0\nsubscriber_core = NONE\n");
	assert_int_equal(tb_config_stream_at(cfg, 0)->publisher_core, 0);
	assert_int_equal(tb_config_stream_at(cfg, 0)->subscriber_core, -1);
	tb_config_free(cfg);
}

static void test_bad_enum(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "idle", "spin", "'spin' is not one of the choices; "
		 "allowed: busy-spin, spin-then-yield or backoff"},
		{"shm", "idle", "busy_spin", "'busy_spin' is not one of the "
		 "choices; allowed: busy-spin, spin-then-yield or backoff"},
		{"shm", "slow_consumer", "drop", "'drop' is not one of the "
		 "choices; allowed: lap or backpressure"},
		{"udp", "loopback", "maybe", "'maybe' is not a yes/no value; "
		 "allowed: yes, no, true, false, 1 or 0"},
		{"udp", "loopback", "2", "'2' is not a yes/no value; allowed: "
		 "yes, no, true, false, 1 or 0"},
	};

	(void)state;
	RUN_BAD(cases);
	expect_error("[stream s]\nid = 1\ntransport = tcp\n",
		     ":3: key 'transport': 'tcp' is not one of the choices; "
		     "allowed: shm, rc, ud or udp");
}

static void test_bad_host_port(void **state)
{
	static const struct bad_case cases[] = {
		{"rc", "control", "127.0.0.1", "'127.0.0.1' has no ':port'; "
		 "allowed: " A_EP},
		{"rc", "control", "127.0.0.1:", "'127.0.0.1:' has an empty "
		 "port; allowed: " A_EP},
		{"rc", "control", ":7000", "':7000' has an empty host; "
		 "allowed: " A_EP},
		{"rc", "control", "127.0.0.1:0", "'127.0.0.1:0': port 0 is out "
		 "of range; allowed: " A_EP},
		{"rc", "control", "127.0.0.1:65536", "'127.0.0.1:65536': port "
		 "65536 is out of range; allowed: " A_EP},
		{"rc", "control", "127.0.0.1:70x", "'127.0.0.1:70x': port "
		 "'70x' is not a decimal integer; allowed: " A_EP},
		{"rc", "control", "127.0.0.1:-1", "'127.0.0.1:-1': port '-1' "
		 "is not a decimal integer; allowed: " A_EP},
		{"rc", "control", "300.1.1.1:7000", "'300.1.1.1:7000': "
		 "'300.1.1.1' is not an IPv4 address; allowed: " A_EP},
		{"rc", "control", "1.2.3:7000", "'1.2.3:7000': '1.2.3' is not "
		 "an IPv4 address; allowed: " A_EP},
		{"rc", "control", "bad!host:7000", "'bad!host:7000': host "
		 "'bad!host' has a character that is not allowed in a host "
		 "name; allowed: " A_EP},
		{"rc", "control", "::1:7000", "'::1:7000' has more than one "
		 "':'; write an IPv6 address in brackets, e.g. [::1]:7000; "
		 "allowed: " A_EP},
		{"rc", "control", "[::1]7000", "'[::1]7000' has no ':port' "
		 "after ']'; allowed: " A_EP},
		{"rc", "control", "[::1:7000", "'[::1:7000' has '[' without "
		 "']'; allowed: " A_EP},
		{"rc", "control", "[zz::1]:7000", "'[zz::1]:7000': 'zz::1' is "
		 "not an IPv6 address; allowed: " A_EP},
		{"rc", "control", "[host]:7000", "'[host]:7000': brackets are "
		 "for IPv6 addresses; allowed: " A_EP},
		{"rc", "control",
		 "h234567890123456789012345678901234567890123456789012345678901234:1",
		 "'h234567890123456789012345678901234567890123456789012345678901234:1' "
		 "has a host longer than 63 characters; allowed: " A_EP},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_group_must_be_ipv4_multicast(void **state)
{
	static const struct bad_case cases[] = {
		{"ud", "group", "10.0.0.1:5000", "'10.0.0.1:5000': '10.0.0.1' "
		 "is not a multicast address; allowed: " A_GROUP},
		{"udp", "group", "223.255.255.255:5000", "'223.255.255.255:5000'"
		 ": '223.255.255.255' is not a multicast address; allowed: "
		 A_GROUP},
		{"udp", "group", "240.0.0.1:5000", "'240.0.0.1:5000': "
		 "'240.0.0.1' is not a multicast address; allowed: " A_GROUP},
		{"udp", "group", "mcast.example:5000", "'mcast.example:5000': "
		 "'mcast.example' is not a numeric IPv4 address; allowed: "
		 A_GROUP},
		{"udp", "group", "[ff02::1]:5000", "'[ff02::1]:5000': 'ff02::1' "
		 "is not a numeric IPv4 address; allowed: " A_GROUP},
		{"udp", "group", "239.1.1.1", "'239.1.1.1' has no ':port'; "
		 "allowed: " A_GROUP},
		{"udp", "group", "239.1.1.1:0", "'239.1.1.1:0': port 0 is out "
		 "of range; allowed: " A_GROUP},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_bad_recovery_list(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "recovery", "a:1,b:2,c:3,d:4,e:5", "'a:1,b:2,c:3,d:4,"
		 "e:5' lists 5 endpoints, more than 4; allowed: " A_REC},
		{"shm", "recovery", "a:1,,b:2", "'a:1,,b:2' has an empty entry "
		 "2; allowed: " A_REC},
		{"shm", "recovery", "a:1,", "'a:1,' has an empty entry 2; "
		 "allowed: " A_REC},
		{"shm", "recovery", ",a:1", "',a:1' has an empty entry 1; "
		 "allowed: " A_REC},
		{"shm", "recovery", "a:1, b:0", "entry 2: 'b:0': port 0 is out "
		 "of range; allowed: " A_REC},
		{"shm", "recovery", "a:1 b:2", "entry 1: 'a:1 b:2' has more "
		 "than one ':'; write an IPv6 address in brackets, e.g. "
		 "[::1]:7000; allowed: " A_REC},
		{"shm", "recovery", "a b:2", "entry 1: 'a b:2': host 'a b' has "
		 "a character that is not allowed in a host name; allowed: "
		 A_REC},
	};

	(void)state;
	RUN_BAD(cases);
}

static void test_bad_token(void **state)
{
	char long_token[129], what[512];
	struct bad_case c = {"shm", "token", long_token, what};
	static const struct bad_case cases[] = {
		{"shm", "token", "a b", "'a b' contains a space or a character "
		 "that is not printable ASCII; allowed: " A_TOKEN},
		{"shm", "token", "a\tb", "'a\\x09b' contains a space or a "
		 "character that is not printable ASCII; allowed: " A_TOKEN},
		{"shm", "token", "caf\xc3\xa9", "'caf\xc3\xa9' contains a space "
		 "or a character that is not printable ASCII; allowed: "
		 A_TOKEN},
		{"rc", "rdma_device", "mlx5 0", "'mlx5 0' contains a space or a "
		 "character that is not printable ASCII; allowed: " A_NAME63},
		{"udp", "interface", "eth\x7f", "'eth\\x7f' contains a space or "
		 "a character that is not printable ASCII; allowed: "
		 A_NAME63},
	};
	tb_config_t *cfg;
	char text[512];

	(void)state;
	RUN_BAD(cases);
	memset(long_token, 'x', 128);
	long_token[128] = '\0';
	snprintf(what, sizeof(what), "'%s' is 128 characters long, more than "
		 "127; allowed: " A_TOKEN, long_token);
	expect_bad_key(&c);

	long_token[127] = '\0';
	snprintf(text, sizeof(text), "[stream s]\nid = 1\ntransport = shm\n"
		 "token = %s\n", long_token);
	cfg = load_ok(text);
	assert_string_equal(tb_config_stream_at(cfg, 0)->token, long_token);
	tb_config_free(cfg);
}

static void test_bad_shm_path(void **state)
{
	static const struct bad_case cases[] = {
		{"shm", "shm_path", "dev/shm/x", "'dev/shm/x' is not an "
		 "absolute path; allowed: an absolute path of at most 255 "
		 "characters"},
		{"shm", "shm_path", "./x", "'./x' is not an absolute path; "
		 "allowed: an absolute path of at most 255 characters"},
	};

	(void)state;
	RUN_BAD(cases);
}

/* shm_mode: octal, the owner reads and writes, nobody else writes;
 * shm_group: a name or a number; both only for shm. */
static void test_shm_mode_and_group(void **state)
{
	static const char allowed[] = "allowed: an octal file mode such as "
		"0600 or 0640 in which the owner reads and writes, and group "
		"and others may read but never write";
	static const struct bad_case cases[] = {
		{"shm", "shm_mode", "0666", "'0666' lets group or others write "
		 "or execute; %s"},
		{"shm", "shm_mode", "0620", "'0620' lets group or others write "
		 "or execute; %s"},
		{"shm", "shm_mode", "0700", "'0700' lets group or others write "
		 "or execute; %s"},
		{"shm", "shm_mode", "0400", "'0400' does not let the owner read "
		 "and write; %s"},
		{"shm", "shm_mode", "01600", "'01600' is not an octal mode; %s"},
		{"shm", "shm_mode", "1600", "'1600' is not a file mode; %s"},
		{"shm", "shm_mode", "0x180", "'0x180' is not an octal mode; %s"},
		{"shm", "shm_mode", "0608", "'0608' is not an octal mode; %s"},
		{"udp", "shm_mode", "0600", "does not apply to transport udp; "
		 "it is for shm"},
		{"rc", "shm_group", "trading", "does not apply to transport rc; "
		 "it is for shm"},
	};
	tb_stream_cfg_t c;
	tb_config_t *cfg;
	const tb_stream_cfg_t *st;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bad_case b = cases[i];
		char what[512];

		snprintf(what, sizeof(what), b.what, allowed);
		b.what = what;
		print_message("  %s = %s\n", b.key, b.value);
		expect_bad_key(&b);
	}
	cfg = load_ok("[stream a]\nid = 1\ntransport = shm\nshm_mode = 0644\n"
		      "shm_group = trading\n"
		      "[stream b]\nid = 2\ntransport = shm\nshm_mode = 600\n"
		      "shm_group = 1234\n"
		      "[stream c]\nid = 3\ntransport = shm\n");
	st = tb_config_stream(cfg, "a");
	assert_int_equal(st->shm_mode, 0644);
	assert_string_equal(st->shm_group, "trading");
	st = tb_config_stream(cfg, "b");
	assert_int_equal(st->shm_mode, 0600);
	assert_string_equal(st->shm_group, "1234");
	st = tb_config_stream(cfg, "c");
	assert_int_equal(st->shm_mode, 0); /* the default: 0600 or 0640 */
	assert_string_equal(st->shm_group, "");
	tb_config_free(cfg);
	/* The same rule for a struct filled by hand. */
	init_named(&c, TB_TRANSPORT_SHM);
	c.shm_mode = 0640;
	assert_int_equal(tb_stream_cfg_validate(&c), 0);
	c.shm_mode = 0660;
	expect_invalid(&c, "stream 's': field 'shm_mode': 0660 lets group or "
		       "others write or execute; allowed: an octal file mode "
		       "such as 0600 or 0640 in which the owner reads and "
		       "writes, and group and others may read but never write");
}

/* inih's line buffer is 200 bytes: a longer line is refused, never split
 * in two (which would shift every later line number). */
static void test_line_too_long(void **state)
{
	char text[512];
	int n;

	(void)state;
	n = snprintf(text, sizeof(text), "[stream s]\nid = 1\ntransport = shm\n"
		     "shm_path = /");
	memset(text + n, 'p', 250);
	strcpy(text + n + 250, "\n");
	expect_error(text, ":4: line is 262 characters long; at most 199 are "
		     "allowed");
}

static void test_nul_byte(void **state)
{
	static const char text[] = "[stream s]\nid = 1\0\ntransport = shm\n";

	(void)state;
	expect_error_n(text, sizeof(text) - 1, ":2: line contains a NUL byte; "
		       "a config file is text");
}

/* ----------------------------------------------------- file structure */

static void test_unknown_key(void **state)
{
	tb_config_t *cfg = NULL;
	char want[PATH_MAX + 64];

	(void)state;
	expect_error("[stream s]\nid = 1\ntransport = shm\nringsize = 4M\n",
		     ":4: key 'ringsize': unknown key; did you mean "
		     "'ring_size'?");
	expect_error("[stream s]\nid = 1\nTransport = shm\n",
		     ":3: key 'Transport': unknown key; did you mean "
		     "'transport'?");
	write_file("[stream s]\ncolour = red\n",
		   strlen("[stream s]\ncolour = red\n"));
	assert_int_equal(tb_config_load(&cfg, path), TB_ECONFIG);
	snprintf(want, sizeof(want), "%s:2: key 'colour': unknown key; known "
		 "keys: id, transport, ring_size, ", path);
	assert_memory_equal(tb_errmsg(), want, strlen(want));
	assert_non_null(strstr(tb_errmsg(), ", rcvbuf"));
}

static void test_unknown_section(void **state)
{
	(void)state;
	expect_error("[defaults]\nid = 1\n", ":1: section '[defaults]': "
		     "unknown section; only [stream NAME] sections are "
		     "allowed");
	expect_error("[stream a]\nid = 1\ntransport = shm\n[streams b]\n",
		     ":4: section '[streams b]': unknown section; only "
		     "[stream NAME] sections are allowed");
	expect_error("[]\n", ":1: section '[]': unknown section; only "
		     "[stream NAME] sections are allowed");
}

static void test_bad_section_header(void **state)
{
	char text[256], name[65];

	(void)state;
	expect_error("[stream]\n", ":1: section '[stream]': expected "
		     "[stream NAME] with exactly one name");
	expect_error("[stream a b]\n", ":1: section '[stream a b]': expected "
		     "[stream NAME] with exactly one name");
	expect_error("[stream a/b]\n", ":1: section '[stream a/b]': invalid "
		     "stream name; allowed: 1 to 63 of A-Z a-z 0-9 _ . -");
	expect_error("[stream a\n", ":1: section '[stream a': missing ']'");
	expect_error("[stream a] x\n", ":1: section '[stream a]': unexpected "
		     "text after ']'");
	memset(name, 'n', 64);
	name[64] = '\0';
	snprintf(text, sizeof(text), "[stream %s]\n", name);
	{
		char tail[256];

		snprintf(tail, sizeof(tail), ":1: section '[stream %s]': "
			 "invalid stream name; allowed: 1 to 63 of A-Z a-z "
			 "0-9 _ . -", name);
		expect_error(text, tail);
	}
}

static void test_key_before_section(void **state)
{
	(void)state;
	expect_error("# top\nid = 1\n[stream a]\n", ":2: key 'id': comes "
		     "before any section; put it under a [stream NAME] "
		     "header");
}

static void test_syntax_error(void **state)
{
	(void)state;
	expect_error("[stream a]\nid = 1\ntransport shm\n",
		     ":3: expected 'key = value', '[stream NAME]' or a "
		     "comment");
}

static void test_first_error_wins(void **state)
{
	(void)state;
	/* inih's syntax error comes before our bad value */
	expect_error("[stream a]\njunk\nid = x\n", ":2: expected 'key = "
		     "value', '[stream NAME]' or a comment");
	/* our bad value comes before inih's syntax error */
	expect_error("[stream a]\nid = x\njunk\n", ":2: key 'id': 'x' is not "
		     "a decimal integer; allowed: " A_ID);
	/* the first stream's missing key before the second's bad value */
	expect_error("[stream a]\nid = 1\n[stream b]\nid = x\n",
		     ": stream 'a': missing required key 'transport'");
}

static void test_duplicate_key(void **state)
{
	(void)state;
	expect_error("[stream s]\nid = 1\ntransport = shm\nid = 2\n",
		     ":4: key 'id': given twice in stream 's' (first at line "
		     "2)");
	expect_error("[stream s]\nid = 1\ntransport = shm\n"
		     "ring_size = 1M\nring_size = 1M\n",
		     ":5: key 'ring_size': given twice in stream 's' (first "
		     "at line 4)");
}

static void test_duplicate_stream(void **state)
{
	(void)state;
	expect_error("[stream a]\nid = 1\ntransport = shm\n\n"
		     "[stream a]\nid = 2\ntransport = shm\n",
		     ":5: section '[stream a]': stream 'a' is already defined "
		     "at line 1");
}

static void test_duplicate_id(void **state)
{
	(void)state;
	expect_error("[stream a]\nid = 7\ntransport = shm\n"
		     "[stream b]\ntransport = shm\nid = 7\n",
		     ":6: key 'id': 7 is already the id of stream 'a' (line "
		     "2); ids must be unique");
}

static void test_missing_required_keys(void **state)
{
	(void)state;
	expect_error("[stream s]\ntransport = shm\n",
		     ": stream 's': missing required key 'id'");
	expect_error("[stream s]\nid = 1\n",
		     ": stream 's': missing required key 'transport'");
	expect_error("[stream s]\n", ": stream 's': missing required key "
		     "'id'");
	expect_error("[stream s]\nid = 1\ntransport = rc\n",
		     ": stream 's': missing required key 'control' "
		     "(transport rc needs it)");
	expect_error("[stream s]\nid = 1\ntransport = ud\n",
		     ": stream 's': missing required key 'group' "
		     "(transport ud needs it)");
	expect_error("[stream s]\nid = 1\ntransport = udp\n"
		     "control = 127.0.0.1:1\n",
		     ": stream 's': missing required key 'group' "
		     "(transport udp needs it)");
}

static void test_key_for_another_transport(void **state)
{
	(void)state;
	expect_error("[stream s]\nid = 1\ntransport = shm\n"
		     "group = 239.1.1.1:5000\n",
		     ":4: key 'group': does not apply to transport shm; it is "
		     "for ud and udp");
	expect_error("[stream s]\nshm_path = /dev/shm/x\nid = 1\n"
		     "transport = rc\ncontrol = 127.0.0.1:7000\n",
		     ":2: key 'shm_path': does not apply to transport rc; it "
		     "is for shm");
	expect_error("[stream s]\nid = 1\ntransport = udp\n"
		     "group = 239.1.1.1:5000\nrdma_device = mlx5_0\n",
		     ":5: key 'rdma_device': does not apply to transport udp; "
		     "it is for rc and ud");
	expect_error("[stream s]\nid = 1\ntransport = shm\n"
		     "control = 127.0.0.1:7000\n",
		     ":4: key 'control': does not apply to transport shm; it "
		     "is for rc, ud and udp");
	expect_error("[stream s]\nid = 1\ntransport = ud\n"
		     "group = 239.1.1.1:5000\nrcvbuf = 1M\n",
		     ":5: key 'rcvbuf': does not apply to transport ud; it is "
		     "for udp");
}

/* An empty file, or one with comments only, is refused: a process given a
 * config without streams has been given the wrong file. */
static void test_empty_file(void **state)
{
	(void)state;
	expect_error("", ": no [stream NAME] section; a config file describes "
		     "at least one stream");
	expect_error("# nothing here\n\n; really\n", ": no [stream NAME] "
		     "section; a config file describes at least one stream");
}

static void test_missing_file(void **state)
{
	tb_config_t *cfg = (tb_config_t *)&cfg;
	char missing[PATH_MAX + 16], want[PATH_MAX + 128];

	(void)state;
	snprintf(missing, sizeof(missing), "%s/nope.ini", dir);
	assert_int_equal(tb_config_load(&cfg, missing), TB_ENOENT);
	assert_null(cfg);
	snprintf(want, sizeof(want), "%s: cannot open config file: No such "
		 "file or directory", missing);
	assert_string_equal(tb_errmsg(), want);

	assert_int_equal(tb_config_load(&cfg, dir), TB_ECONFIG);
	assert_null(cfg);
	snprintf(want, sizeof(want), "%s: is a directory; a config file must "
		 "be a regular file", dir);
	assert_string_equal(tb_errmsg(), want);

	assert_int_equal(tb_config_load(NULL, path), TB_EINVAL);
	assert_int_equal(tb_config_load(&cfg, NULL), TB_EINVAL);
}

/* ------------------------------------------------ what is read, and how */

/*
 * Loads `file` in a child process and returns its result, with its message
 * in msg[0..cap).  The child has 5 seconds, and outside ASan (whose shadow
 * memory an address-space limit would break) 1 GiB of address space: a
 * loader that blocks on a FIFO, or reads /dev/zero until memory runs out,
 * fails the test instead of hanging it or starving the machine.
 */
static int load_in_child(const char *file, char *msg, size_t cap)
{
	int fds[2], status, rc = 0;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_config_t *cfg = NULL;
#ifndef __SANITIZE_ADDRESS__
		struct rlimit as = {1ul << 30, 1ul << 30};

		setrlimit(RLIMIT_AS, &as);
#endif
		close(fds[0]);
		alarm(5);
		rc = tb_config_load(&cfg, file);
		tb_config_free(cfg);
		if (write(fds[1], &rc, sizeof(rc)) != sizeof(rc) ||
		    write(fds[1], tb_errmsg(), strlen(tb_errmsg())) < 0)
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &rc, sizeof(rc)) == sizeof(rc) ? 0 : -1,
			 0);
	while (got + 1 < cap && (n = read(fds[0], msg + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	msg[got] = '\0';
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("loading %s did not return (child %s %d)", file,
			 WIFSIGNALED(status) ? "killed by signal" : "exit",
			 WIFSIGNALED(status) ? WTERMSIG(status) :
			 WEXITSTATUS(status));
	return rc;
}

/* Only a regular file is read.  /dev/zero (no newline, no end) used to be
 * read until the OOM killer came, a FIFO without a writer blocked the
 * open forever, /dev/null read as an empty file: each is refused now, at
 * once, before a byte is read. */
static void test_not_a_regular_file(void **state)
{
	char fifo[PATH_MAX], msg[1024], want[PATH_MAX + 128];
	static const struct {
		const char *path, *kind;
	} devices[] = {
		{"/dev/null", "a character device"},
		{"/dev/zero", "a character device"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
		print_message("  %s\n", devices[i].path);
		assert_int_equal(load_in_child(devices[i].path, msg, sizeof(msg)),
				 TB_ECONFIG);
		snprintf(want, sizeof(want), "%s: is %s; a config file must be "
			 "a regular file", devices[i].path, devices[i].kind);
		assert_string_equal(msg, want);
	}

	snprintf(fifo, sizeof(fifo), "%s/fifo.ini", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(load_in_child(fifo, msg, sizeof(msg)), TB_ECONFIG);
	snprintf(want, sizeof(want), "%s: is a FIFO; a config file must be a "
		 "regular file", fifo);
	assert_string_equal(msg, want);
	unlink(fifo);
}

/* Writes a file of exactly `size` bytes: one valid stream, then comment
 * lines to fill. */
static void write_sized(size_t size)
{
	static const char head[] = "[stream s]\nid = 1\ntransport = shm\n";
	char *text = malloc(size);
	size_t off;

	assert_non_null(text);
	assert_true(size > sizeof(head));
	memcpy(text, head, sizeof(head) - 1);
	for (off = sizeof(head) - 1; off < size; off += 100) {
		size_t n = size - off < 100 ? size - off : 100;

		memset(text + off, '#', n);
		text[off + n - 1] = '\n';
	}
	write_file(text, size);
	free(text);
}

/* A config file holds at most TB_CONFIG_FILE_MAX bytes: at the bound it
 * loads, one byte past it is refused with the file, its size and the
 * bound, and the loader has not read it. */
static void test_file_size_bound(void **state)
{
	tb_config_t *cfg = NULL;
	char want[PATH_MAX + 128];

	(void)state;
	write_sized(TB_CONFIG_FILE_MAX);
	assert_int_equal(tb_config_load(&cfg, path), 0);
	assert_int_equal(tb_config_stream_count(cfg), 1);
	tb_config_free(cfg);

	write_sized(TB_CONFIG_FILE_MAX + 1);
	cfg = (tb_config_t *)&cfg;
	assert_int_equal(tb_config_load(&cfg, path), TB_ECONFIG);
	assert_null(cfg);
	snprintf(want, sizeof(want), "%s: 1048577 bytes, more than the 1048576 "
		 "(1 MiB) a config file may hold", path);
	assert_string_equal(tb_errmsg(), want);

	/* the same bound on text handed over in memory */
	assert_int_equal(tb_config_load_buffer(&cfg, "mem.ini", "",
					       TB_CONFIG_FILE_MAX + 1),
			 TB_ECONFIG);
	assert_string_equal(tb_errmsg(), "mem.ini: 1048577 bytes, more than "
			    "the 1048576 (1 MiB) a config file may hold");
}

/* No control character, DEL or C1 control (UTF-8 c2 80..c2 9f), and no
 * byte that is not part of well-formed UTF-8. */
static void assert_safe_to_print(const char *msg)
{
	const unsigned char *u = (const unsigned char *)msg;

	for (size_t i = 0; u[i]; i++) {
		if (u[i] < 0x20 || u[i] == 0x7f)
			fail_msg("byte %02x at %zu of '%s'", u[i], i, msg);
		if (u[i] >= 0x80 && !(u[i] == 0xc3 && u[i + 1] == 0xa9) &&
		    !(u[i] == 0xa9 && i > 0 && u[i - 1] == 0xc3))
			fail_msg("byte %02x at %zu of '%s'", u[i], i, msg);
	}
}

static void expect_escaped(const char *text, const char *tail)
{
	expect_error(text, tail);
	assert_safe_to_print(tb_errmsg());
}

/* Messages quote keys, values and section headers from the file: their
 * bytes appear escaped (\xNN for control characters, DEL, C1 controls,
 * bidirectional overrides and bytes that are not UTF-8; \\ for a
 * backslash), so that a file cannot drive the terminal a message is
 * printed on.  Well-formed UTF-8 text stays as it is. */
static void test_messages_escape_file_bytes(void **state)
{
	char text[512], line[256];
	tb_stream_cfg_t c;

	(void)state;
	/* a key: ESC [ 2 J clears the screen */
	expect_escaped("[stream s]\nid = 1\ntransport = shm\n"
		       "ring_siz\x1b = 4M\n",
		       ":4: key 'ring_siz\\x1b': unknown key; did you mean "
		       "'ring_size'?");
	{
		static const char t[] = "[stream s]\nid = 1\ntransport = shm\n"
					"\x1b[2J = 4M\n";
		tb_config_t *cfg = NULL;
		char want[PATH_MAX + 64];

		write_file(t, sizeof(t) - 1);
		assert_int_equal(tb_config_load(&cfg, path), TB_ECONFIG);
		snprintf(want, sizeof(want), "%s:4: key '\\x1b[2J': unknown "
			 "key; known keys: id, ", path);
		assert_memory_equal(tb_errmsg(), want, strlen(want));
		assert_safe_to_print(tb_errmsg());
	}
	/* a value: OSC sets the window title, BEL ends it */
	expect_escaped("[stream s]\nid = 1\ntransport = shm\n"
		       "idle = \x1b]0;owned\x07\n",
		       ":4: key 'idle': '\\x1b]0;owned\\x07' is not one of the "
		       "choices; allowed: busy-spin, spin-then-yield or backoff");
	/* a section: the 8-bit CSI (C1, UTF-8 c2 9b), a byte that is not
	 * UTF-8, a right-to-left override (e2 80 ae), a backslash */
	expect_escaped("[stream a\xc2\x9b" "31m\xff\xe2\x80\xae\\b]\n",
		       ":1: section '[stream a\\xc2\\x9b31m\\xff\\xe2\\x80\\xae"
		       "\\\\b]': invalid stream name; allowed: 1 to 63 of A-Z "
		       "a-z 0-9 _ . -");
	expect_escaped("[stream a\n\x1b[1A",
		       ":1: section '[stream a': missing ']'");
	expect_escaped("[\x1b[2K]\n", ":1: section '[\\x1b[2K]': unknown "
		       "section; only [stream NAME] sections are allowed");
	/* overlong and truncated UTF-8 are not UTF-8 */
	expect_escaped("[stream \xc0\xaf\xe2\x82]\n", ":1: section '[stream "
		       "\\xc0\\xaf\\xe2\\x82]': invalid stream name; allowed: 1 "
		       "to 63 of A-Z a-z 0-9 _ . -");
	/* well-formed UTF-8 is shown as it is */
	expect_escaped("[stream caf\xc3\xa9]\n", ":1: section '[stream "
		       "caf\xc3\xa9]': invalid stream name; allowed: 1 to 63 "
		       "of A-Z a-z 0-9 _ . -");

	/* a whole line of control bytes: the message is cut, never raw */
	memset(line, '\x1b', 190);
	line[190] = '\0';
	snprintf(text, sizeof(text), "[stream s]\nid = 1\ntransport = shm\n"
		 "token = x%s\n", line);
	write_file(text, strlen(text));
	{
		tb_config_t *cfg = NULL;

		assert_int_equal(tb_config_load(&cfg, path), TB_ECONFIG);
	}
	assert_non_null(strstr(tb_errmsg(), ":4: key 'token': 'x\\x1b\\x1b"));
	assert_safe_to_print(tb_errmsg());

	/* a name in a struct filled by hand is quoted the same way */
	tb_stream_cfg_init(&c);
	snprintf(c.name, sizeof(c.name), "s");
	c.id = 1;
	c.transport = TB_TRANSPORT_SHM;
	snprintf(c.name, sizeof(c.name), "\x1b[2J");
	assert_int_equal(tb_stream_cfg_validate(&c), TB_ECONFIG);
	assert_string_equal(tb_errmsg(), "stream name '\\x1b[2J' is invalid; "
			    "allowed: 1 to 63 of A-Z a-z 0-9 _ . -");
}

/* Every example in config/ loads, and every stream in it validates. */
static void test_example_files(void **state)
{
	glob_t g;
	size_t i;
	bool demo = false;

	(void)state;
	assert_int_equal(glob("config/*.ini", 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 5);
	for (i = 0; i < g.gl_pathc; i++) {
		tb_config_t *cfg = NULL;
		int rc = tb_config_load(&cfg, g.gl_pathv[i]);

		print_message("  %s\n", g.gl_pathv[i]);
		if (rc != 0)
			fail_msg("%s: %s", g.gl_pathv[i], tb_errmsg());
		assert_true(tb_config_stream_count(cfg) >= 1);
		for (int j = 0; j < tb_config_stream_count(cfg); j++) {
			const tb_stream_cfg_t *s = tb_config_stream_at(cfg, j);

			if (tb_stream_cfg_validate(s) != 0)
				fail_msg("%s: %s", g.gl_pathv[i], tb_errmsg());
		}
		if (strcmp(g.gl_pathv[i], "config/demo.ini") == 0) {
			const tb_stream_cfg_t *q = tb_config_stream(cfg,
								    "quotes");

			demo = true;
			const tb_stream_cfg_t *r = tb_config_stream(cfg,
								    "quotes_rc");

			/* quotes, trades, quotes_rc, and the whole story's
			 * md_rc and md_ud (tools/demo.sh). */
			assert_int_equal(tb_config_stream_count(cfg), 5);
			assert_non_null(tb_config_stream(cfg, "md_rc"));
			assert_int_equal(tb_config_stream(cfg, "md_rc")->transport,
					 TB_TRANSPORT_RC);
			assert_non_null(tb_config_stream(cfg, "md_ud"));
			assert_int_equal(tb_config_stream(cfg, "md_ud")->transport,
					 TB_TRANSPORT_UD);
			/* strategy-b recovers from tb-recoveryd, which fills
			 * its own gaps from the feed handler's retention */
			assert_int_equal(tb_config_stream(cfg, "md_ud")->n_recovery, 1);
			assert_int_equal(tb_config_stream(cfg, "md_ud")->recovery[0].port,
					 17520);
			assert_int_equal(tb_config_stream(cfg, "md_ud")
						 ->retention_endpoint.port, 17521);
			assert_non_null(r);
			assert_int_equal(r->transport, TB_TRANSPORT_RC);
			assert_int_equal(r->slow_consumer, TB_SLOW_BACKPRESSURE);
			assert_int_equal(r->control.port, 17500);
			assert_non_null(q);
			assert_int_equal(q->id, 1);
			assert_int_equal(q->transport, TB_TRANSPORT_SHM);
			assert_int_equal(tb_config_stream_at(cfg, 1)->transport,
					 TB_TRANSPORT_SHM);
		}
		tb_config_free(cfg);
	}
	globfree(&g);
	assert_true(demo);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_validate_struct),
		cmocka_unit_test(test_validate_core_count),
		cmocka_unit_test(test_endpoint_parse),
		cmocka_unit_test(test_minimal_file_takes_defaults),
		cmocka_unit_test(test_shm_full),
		cmocka_unit_test(test_rc_full),
		cmocka_unit_test(test_ud_full),
		cmocka_unit_test(test_udp_full),
		cmocka_unit_test(test_several_streams_and_lookup),
		cmocka_unit_test(test_load_stream),
		cmocka_unit_test(test_layout_and_line_numbers),
		cmocka_unit_test(test_indented_line_is_not_a_continuation),
		cmocka_unit_test(test_long_stream_name),
		cmocka_unit_test(test_bad_integer),
		cmocka_unit_test(test_integer_overflow),
		cmocka_unit_test(test_negative_unsigned),
		cmocka_unit_test(test_bad_size_suffix),
		cmocka_unit_test(test_ring_size_power_of_two_and_range),
		cmocka_unit_test(test_integer_ranges),
		cmocka_unit_test(test_liveness_at_least_twice_heartbeat),
		cmocka_unit_test(test_bad_core),
		cmocka_unit_test(test_bad_enum),
		cmocka_unit_test(test_bad_host_port),
		cmocka_unit_test(test_group_must_be_ipv4_multicast),
		cmocka_unit_test(test_bad_recovery_list),
		cmocka_unit_test(test_bad_token),
		cmocka_unit_test(test_bad_shm_path),
		cmocka_unit_test(test_shm_mode_and_group),
		cmocka_unit_test(test_line_too_long),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_unknown_key),
		cmocka_unit_test(test_unknown_section),
		cmocka_unit_test(test_bad_section_header),
		cmocka_unit_test(test_key_before_section),
		cmocka_unit_test(test_syntax_error),
		cmocka_unit_test(test_first_error_wins),
		cmocka_unit_test(test_duplicate_key),
		cmocka_unit_test(test_duplicate_stream),
		cmocka_unit_test(test_duplicate_id),
		cmocka_unit_test(test_missing_required_keys),
		cmocka_unit_test(test_key_for_another_transport),
		cmocka_unit_test(test_empty_file),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_not_a_regular_file),
		cmocka_unit_test(test_file_size_bound),
		cmocka_unit_test(test_messages_escape_file_bytes),
		cmocka_unit_test(test_example_files),
		cmocka_unit_test(test_recovery_keys),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
