/*
 * test_tb_dump.c - the real tb-dump on known input: schema messages published
 * by this test on an shm stream through the public API, and written by this
 * test into a retransmit store.
 *
 * The input holds a version-2 Quote, a BookLevelUpdate with two levels, a
 * Trade from a version-1 sender, an InstrumentDefinition, a truncated Quote,
 * a message of an unknown template, and a Quote in a frame that calls it a
 * Trade.  Every decodable line must be
 * exactly what the generated printer makes of the same bytes (text and
 * JSON), after the frame's sequence, stream and publish time; the three bad
 * ones must print the decoder's reason and be counted.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include "bus/frame.h"
#include "bus/recovery/store.h"
#include <tickbus/tickbus.h>
#include "tickbus_schema.h"
#include "tickbus_schema_v1.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#define NMSG 7
#define STREAM_ID 5
#define STORE_STREAM 9

static char dir[] = "/tmp/tb-test-dump-XXXXXX";
static char ini[128], ring[128], storedir[128];

static struct {
	uint8_t data[512];
	uint32_t len;
	uint16_t template_id;
	int bad;                /* not decodable */
	const char *reason;     /* why, if not the decoder's code */
} msg[NMSG];

static void build_messages(void)
{
	tb_md_quote_t q;
	tb_md_book_level_update_t b;
	tb_md_book_level_update_levels_entry_t lv[2];
	tb_v1_trade_t t;
	tb_md_instrument_definition_t def;
	int64_t n;
	int i;

	memset(msg, 0, sizeof(msg));
	tb_md_quote_init(&q);
	q.instrument_id = 42;
	q.bid_px.mantissa = 101250000000;
	q.bid_qty = 300;
	q.ask_px.mantissa = 101260000000;
	q.ask_qty = 200;
	q.bid_orders = 3;
	n = tb_md_quote_encode(msg[0].data, sizeof(msg[0].data), &q);
	assert_true(n > 0);
	msg[0].len = (uint32_t)n;
	msg[0].template_id = TB_MD_QUOTE_TEMPLATE_ID;

	tb_md_book_level_update_init(&b);
	b.instrument_id = 42;
	for (i = 0; i < 2; i++) {
		tb_md_book_level_update_levels_entry_init(&lv[i]);
		lv[i].action = TB_MD_BOOK_ACTION_MODIFY;
		lv[i].side = TB_MD_SIDE_BUY;
		lv[i].level = (uint8_t)i;
		lv[i].price.mantissa = 101250000000 - i * 10000000;
		lv[i].qty = 100;
	}
	n = tb_md_book_level_update_encode(msg[1].data, sizeof(msg[1].data), &b, lv, 2);
	assert_true(n > 0);
	msg[1].len = (uint32_t)n;
	msg[1].template_id = TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID;

	tb_v1_trade_init(&t);
	t.instrument_id = 42;
	t.price.mantissa = 101255000000;
	t.qty = 50;
	t.trade_id = 777;
	n = tb_v1_trade_encode(msg[2].data, sizeof(msg[2].data), &t);
	assert_true(n > 0);
	msg[2].len = (uint32_t)n;
	msg[2].template_id = TB_MD_TRADE_TEMPLATE_ID;

	tb_md_instrument_definition_init(&def);
	def.instrument_id = 42;
	memcpy(def.symbol, "ESZ6", 4);
	memcpy(def.currency, "USD", 3);
	def.tick_size.mantissa = 250000000;
	def.state = TB_MD_TRADING_STATE_OPEN;
	n = tb_md_instrument_definition_encode(msg[3].data, sizeof(msg[3].data), &def);
	assert_true(n > 0);
	msg[3].len = (uint32_t)n;
	msg[3].template_id = TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID;

	/* A Quote cut inside its block, and a template the schema lacks. */
	memcpy(msg[4].data, msg[0].data, 20);
	msg[4].len = 20;
	msg[4].template_id = TB_MD_QUOTE_TEMPLATE_ID;
	msg[4].bad = 1;
	memcpy(msg[5].data, msg[0].data, msg[0].len);
	msg[5].data[2] = 200;  /* templateId 200 */
	msg[5].len = msg[0].len;
	msg[5].template_id = 200;
	msg[5].bad = 1;
	/* A good Quote in a frame that says it is a Trade. */
	memcpy(msg[6].data, msg[0].data, msg[0].len);
	msg[6].len = msg[0].len;
	msg[6].template_id = TB_MD_TRADE_TEMPLATE_ID;
	msg[6].bad = 1;
	msg[6].reason = "the frame's template id differs from the message's";
}

static int setup(void **state)
{
	FILE *f;

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(ini, sizeof(ini), "%s/md.ini", dir);
	snprintf(ring, sizeof(ring), "/dev/shm/tb-test-dump.%d", (int)getpid());
	snprintf(storedir, sizeof(storedir), "%s/store", dir);
	f = fopen(ini, "w");
	if (!f)
		return -1;
	fprintf(f, "[stream md]\nid = %d\ntransport = shm\nring_size = 1M\n"
		"shm_path = %s\n", STREAM_ID, ring);
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, ring);
}

/* The line of `out` for sequence `seq` (text or JSON), copied to `line`. */
static int find_line(const char *out, int json, uint64_t seq, char *line, size_t len)
{
	char pat[64];
	const char *p, *e;

	snprintf(pat, sizeof(pat), json ? "{\"seq\":%" PRIu64 "," : "seq=%" PRIu64 " ",
		 seq);
	for (p = out; (p = strstr(p, pat)) != NULL; p++)
		if (p == out || p[-1] == '\n')
			break;
	if (!p)
		return -1;
	e = strchr(p, '\n');
	if (!e)
		return -1;
	snprintf(line, len, "%.*s", (int)(e - p), p);
	return 0;
}

/* Checks the line of message i (sequence seq) against the printer. */
static void check_line(const char *out, int json, int i, uint64_t seq,
		       uint32_t stream)
{
	char line[2048], want[1600], head[96];
	const char *rest;

	if (find_line(out, json, seq, line, sizeof(line)) != 0)
		fail_msg("no line for seq %" PRIu64 " in:\n%s", seq, out);
	snprintf(head, sizeof(head), json ? "{\"seq\":%" PRIu64 ",\"stream\":%u,\"publishNs\":"
					  : "seq=%" PRIu64 " stream=%u publish_ns=",
		 seq, stream);
	assert_true(strncmp(line, head, strlen(head)) == 0);
	rest = line + strlen(head);
	while (*rest >= '0' && *rest <= '9')
		rest++;
	if (msg[i].bad) {
		int rc = tb_md_format(msg[i].data, msg[i].len, json, want, sizeof(want));
		char reason[160];

		assert_true(msg[i].reason ? rc > 0 : rc < 0);
		snprintf(reason, sizeof(reason), json ? "\"error\":\"%s\"" : "error=\"%s\"",
			 msg[i].reason ? msg[i].reason : tb_md_strerror(rc));
		if (!strstr(rest, reason))
			fail_msg("line %s lacks %s", line, reason);
		return;
	}
	assert_true(tb_md_format(msg[i].data, msg[i].len, json, want, sizeof(want)) > 0);
	if (json) {
		char full[1700];

		snprintf(full, sizeof(full), ",\"msg\":%s}", want);
		assert_string_equal(rest, full);
	} else {
		assert_true(*rest == ' ');
		assert_string_equal(rest + 1, want);
	}
}

/* Starts tb-dump on the live stream and waits until it has opened it. */
static void start_live(proc_t *p, const char *name, int json, const char *count)
{
	char out[192];
	char *argv[12];
	int a = 0;
	uint64_t until = proc_now_ms() + 60000;

	snprintf(out, sizeof(out), "%s/%s", dir, name);
	argv[a++] = "tb-dump";
	argv[a++] = "-c";
	argv[a++] = ini;
	argv[a++] = "-s";
	argv[a++] = "md";
	argv[a++] = "--timeout-ms";
	argv[a++] = "120000";
	if (json)
		argv[a++] = "--json";
	if (count) {
		argv[a++] = "-n";
		argv[a++] = (char *)count;
	}
	argv[a] = NULL;
	assert_int_equal(proc_start(p, out, argv), 0);
	for (;;) {
		char *text = proc_output(p);
		int ready = strstr(text, "tb-dump: reading stream 'md'") != NULL;

		free(text);
		if (ready)
			break;
		assert_true(proc_now_ms() < until);
		assert_int_equal(waitpid(p->pid, NULL, WNOHANG), 0);
		usleep(20000);
	}
}

static void publish_all(void)
{
	tb_publisher_t *pub;
	int i;

	assert_int_equal(tb_publisher_open_file(&pub, ini, "md"), 0);
	for (i = 0; i < NMSG; i++)
		assert_int_equal(tb_pub_offer(pub, msg[i].template_id, msg[i].data,
					      msg[i].len), i + 1);
	assert_int_equal(tb_publisher_close(pub), 0);
}

static void live_text(void **state)
{
	static proc_t p; /* proc.h keeps a pointer until exit */
	char *out;
	int i;

	(void)state;
	build_messages();
	unlink(ring);
	start_live(&p, "live.out", 0, NULL);
	publish_all();
	assert_int_equal(proc_wait(&p, 120000), 0);
	out = proc_output(&p);
	for (i = 0; i < NMSG; i++)
		check_line(out, 0, i, (uint64_t)i + 1, STREAM_ID);
	assert_non_null(strstr(out, "Quote instrumentId=42 bidPx=101.250000000 bidQty=300 "));
	/* The version-1 Trade: the field it did not know is null. */
	assert_non_null(strstr(out, "Trade instrumentId=42 price=101.255000000 qty=50 "
			       "tradeId=777 exchangeTs=null feedRecvTs=null "
			       "aggressorSide=null\n"));
	assert_non_null(strstr(out, " symbol=ESZ6 currency=USD tickSize=0.250000000 "));
	assert_non_null(strstr(out, "error=\"truncated message"));
	assert_non_null(strstr(out, "template=200 "));
	assert_non_null(strstr(out, "tb-dump: printed=7 undecodable=3 lost=0 end=closed"));
	free(out);
}

static void live_json_with_count(void **state)
{
	static proc_t p; /* proc.h keeps a pointer until exit */
	char *out, line[256];
	int i;

	(void)state;
	build_messages();
	unlink(ring);
	start_live(&p, "live.json", 1, "3");
	publish_all();
	assert_int_equal(proc_wait(&p, 120000), 0);
	out = proc_output(&p);
	for (i = 0; i < 3; i++)
		check_line(out, 1, i, (uint64_t)i + 1, STREAM_ID);
	assert_int_equal(find_line(out, 1, 4, line, sizeof(line)), -1);
	assert_non_null(strstr(out, "printed=3 undecodable=0 lost=0 end=count"));
	free(out);
}

static void write_store(uint64_t epoch, int n)
{
	static uint8_t fbuf[1024] __attribute__((aligned(8)));
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)fbuf;
	tb_store_cfg_t cfg;
	tb_store_t *s;
	int i;

	tb_store_cfg_init(&cfg);
	snprintf(cfg.dir, sizeof(cfg.dir), "%s", storedir);
	cfg.stream_id = STORE_STREAM;
	cfg.epoch = epoch;
	assert_int_equal(tb_store_open(&s, &cfg), 0);
	for (i = 0; i < n; i++) {
		tb_frame_init(f, msg[i].len, msg[i].template_id, STORE_STREAM,
			      (uint64_t)i + 1, 1000u + (uint64_t)i);
		memcpy(fbuf + TB_FRAME_HDR_LEN, msg[i].data, msg[i].len);
		assert_int_equal(tb_store_append(s, f), 0);
	}
	assert_int_equal(tb_store_close(s), 0);
}

static void reset_store(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", storedir);
	assert_int_equal(system(cmd), 0);
}

static int run_dump(char **argv, char **out)
{
	char path[192];

	snprintf(path, sizeof(path), "%s/store.out", dir);
	return scenario_run(path, argv, 60000, out);
}

static void from_store(void **state)
{
	char *all3[] = {"tb-dump", "--store", storedir, "--stream-id", "9",
			"--epoch", "3", NULL};
	char *newest[] = {"tb-dump", "--store", storedir, "--stream-id", "9", NULL};
	char *range[] = {"tb-dump", "--store", storedir, "--stream-id", "9",
			 "--epoch", "3", "--from", "2", "-n", "2", "--json", NULL};
	char *out, line[256];
	int i;

	(void)state;
	build_messages();
	reset_store();
	write_store(3, NMSG);
	write_store(4, 1);

	assert_int_equal(run_dump(all3, &out), 0);
	for (i = 0; i < NMSG; i++)
		check_line(out, 0, i, (uint64_t)i + 1, STORE_STREAM);
	assert_non_null(strstr(out, "seq=1 stream=9 publish_ns=1000 Quote "));
	assert_non_null(strstr(out, "printed=7 undecodable=3 lost=0 end=store"));
	free(out);

	/* Without --epoch: the newest, which holds one message. */
	assert_int_equal(run_dump(newest, &out), 0);
	check_line(out, 0, 0, 1, STORE_STREAM);
	assert_non_null(strstr(out, "epoch 4"));
	assert_non_null(strstr(out, "printed=1 "));
	free(out);

	assert_int_equal(run_dump(range, &out), 0);
	check_line(out, 1, 1, 2, STORE_STREAM);
	check_line(out, 1, 2, 3, STORE_STREAM);
	assert_int_equal(find_line(out, 1, 1, line, sizeof(line)), -1);
	assert_int_equal(find_line(out, 1, 4, line, sizeof(line)), -1);
	assert_non_null(strstr(out, "printed=2 undecodable=0 lost=0 end=count"));
	free(out);
}

/* A record lost to damage in the store: a gap line, and the dump goes on
 * to the end. */
static void from_a_damaged_store(void **state)
{
	char *argv[] = {"tb-dump", "--store", storedir, "--stream-id", "9",
			"--epoch", "5", NULL};
	char seg[400], *out;
	off_t off = 64;
	uint8_t b;
	int fd, i;

	(void)state;
	build_messages();
	reset_store();
	write_store(5, NMSG);
	for (i = 0; i < 3; i++)   /* record 4 starts after three */
		off += 8 + ((TB_FRAME_HDR_LEN + msg[i].len + 7) & ~7u);
	snprintf(seg, sizeof(seg), "%s/9-%016x/%020u.seg", storedir, 5u, 1u);
	fd = open(seg, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off + 8 + TB_FRAME_HDR_LEN), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, off + 8 + TB_FRAME_HDR_LEN), 1);
	close(fd);

	assert_int_equal(run_dump(argv, &out), 0);
	for (i = 0; i < NMSG; i++)
		if (i != 3)
			check_line(out, 0, i, (uint64_t)i + 1, STORE_STREAM);
	assert_non_null(strstr(out, "gap first=4 last=4"));
	assert_non_null(strstr(out, "lost=1 end=store"));
	free(out);
}

static void bad_arguments(void **state)
{
	char *nostream[] = {"tb-dump", "--store", storedir, "--stream-id", "10", NULL};
	char *past[] = {"tb-dump", "--store", storedir, "--stream-id", "9",
			"--epoch", "3", "--from", "99", NULL};
	char *noepoch[] = {"tb-dump", "--store", storedir, "--stream-id", "9",
			   "--epoch", "8", NULL};
	char *nothing[] = {"tb-dump", NULL};
	char *both[] = {"tb-dump", "--store", storedir, "--stream-id", "9", "-c",
			ini, NULL};
	char *badnum[] = {"tb-dump", "--store", storedir, "--stream-id", "x9", NULL};
	char *nostreamname[] = {"tb-dump", "-c", ini, "-s", "none", NULL};
	char *out;

	(void)state;
	build_messages();
	reset_store();
	write_store(3, NMSG);
	assert_int_equal(run_dump(nostream, &out), 1);
	assert_non_null(strstr(out, "no epoch of stream 10"));
	free(out);
	assert_int_equal(run_dump(past, &out), 1);
	assert_non_null(strstr(out, "--from 99 is after the last stored sequence 7"));
	free(out);
	assert_int_equal(run_dump(noepoch, &out), 1);
	assert_non_null(strstr(out, "tb-dump: "));
	free(out);
	assert_int_equal(run_dump(nothing, &out), 2);
	assert_non_null(strstr(out, "usage: tb-dump"));
	free(out);
	assert_int_equal(run_dump(both, &out), 2);
	free(out);
	assert_int_equal(run_dump(badnum, &out), 2);
	assert_non_null(strstr(out, "--stream-id 'x9'"));
	free(out);
	assert_int_equal(run_dump(nostreamname, &out), 1);
	assert_non_null(strstr(out, "none"));
	free(out);
}

/* The first line of `out` that starts with `prefix`, or NULL. */
static const char *line_starting(const char *out, const char *prefix)
{
	const char *p;

	for (p = out; (p = strstr(p, prefix)) != NULL; p++)
		if (p == out || p[-1] == '\n')
			return p;
	return NULL;
}

/*
 * A dump that falls a whole ring behind: tb-dump is stopped (SIGSTOP) while
 * the publisher laps its 64 KiB ring several times, then goes on a little
 * after it runs again.  The dump must print the loss in line, exactly: a
 * gap from the message after the last it printed, then every message after
 * the gap up to the last, so that printed + lost is everything published.
 */
static void lapped_dump_prints_the_gap(void **state)
{
	static proc_t p;
	FILE *f;
	char lapini[192], *out, pat[64];
	const char *gap;
	tb_publisher_t *pub;
	uint64_t first = 0, last = 0, until, i, total = 3000;
	char *argv[] = {"tb-dump", "-c", lapini, "-s", "lap", "--timeout-ms",
			"120000", NULL};

	(void)state;
	build_messages();
	unlink(ring);
	snprintf(lapini, sizeof(lapini), "%s/lap.ini", dir);
	f = fopen(lapini, "w");
	assert_non_null(f);
	fprintf(f, "[stream lap]\nid = %d\ntransport = shm\nring_size = 64K\n"
		"shm_path = %s\n", STREAM_ID, ring);
	fclose(f);
	snprintf(pat, sizeof(pat), "%s/lap.out", dir);
	assert_int_equal(proc_start(&p, pat, argv), 0);
	until = proc_now_ms() + 60000;
	for (;;) {
		char *text = proc_output(&p);
		int ready = strstr(text, "reading stream 'lap'") != NULL;

		free(text);
		if (ready)
			break;
		assert_true(proc_now_ms() < until);
		usleep(20000);
	}
	assert_int_equal(tb_publisher_open_file(&pub, lapini, "lap"), 0);
	assert_int_equal(tb_pub_offer(pub, msg[0].template_id, msg[0].data,
				      msg[0].len), 1);
	for (;;) { /* wait until the first is printed, then freeze the dump */
		char *text = proc_output(&p);
		int seen = line_starting(text, "seq=1 ") != NULL;

		free(text);
		if (seen)
			break;
		assert_true(proc_now_ms() < until);
		usleep(10000);
	}
	assert_int_equal(kill(p.pid, SIGSTOP), 0);
	for (i = 2; i <= total; i++)
		assert_int_equal(tb_pub_offer(pub, msg[0].template_id, msg[0].data,
					      msg[0].len), (int64_t)i);
	assert_int_equal(kill(p.pid, SIGCONT), 0);
	/* The lapped reader goes on from the live tail: what follows is
	 * printed after the gap line. */
	usleep(300000);
	for (; i <= total + 10; i++)
		assert_int_equal(tb_pub_offer(pub, msg[0].template_id, msg[0].data,
					      msg[0].len), (int64_t)i);
	total += 10;
	assert_int_equal(tb_publisher_close(pub), 0);
	assert_int_equal(proc_wait(&p, 120000), 0);
	out = proc_output(&p);
	gap = line_starting(out, "gap first=");
	if (!gap || sscanf(gap, "gap first=%" SCNu64 " last=%" SCNu64, &first, &last) != 2)
		fail_msg("no gap line in:\n%.2000s", out);
	assert_int_equal(first, 2);
	assert_true(last > 2 && last < total);
	/* Nothing between 1 and the gap, everything after it. */
	snprintf(pat, sizeof(pat), "seq=%" PRIu64 " ", last + 1);
	assert_non_null(line_starting(out, pat));
	snprintf(pat, sizeof(pat), "seq=%" PRIu64 " ", total);
	assert_non_null(line_starting(out, pat));
	assert_null(line_starting(out, "seq=2 "));
	snprintf(pat, sizeof(pat), "printed=%" PRIu64 " undecodable=0 lost=%" PRIu64
		 " end=closed", total - (last - first + 1), last - first + 1);
	if (!strstr(out, pat))
		fail_msg("no \"%s\" in:\n%s", pat, strstr(out, "tb-dump: printed") ?
			 strstr(out, "tb-dump: printed") : "(no summary)");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(live_text),
		cmocka_unit_test(live_json_with_count),
		cmocka_unit_test(lapped_dump_prints_the_gap),
		cmocka_unit_test(from_store),
		cmocka_unit_test(from_a_damaged_store),
		cmocka_unit_test(bad_arguments),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
