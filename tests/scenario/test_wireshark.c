/*
 * The Wireshark dissector (tools/wireshark/tickbus.lua) run by the real
 * tshark on a capture this test writes from a known stream: udp datagrams
 * made by tickbus's own encoders (packet.h, frame.h, the generated schema:
 * two Quotes and a heartbeat datagram), a control HELLO and SUBSCRIBE and a
 * recovery HELLO and REQUEST on TCP.  `tshark -X lua_script:... -T fields`
 * must give back every value sent; a datagram of another packet version is flagged,
 * not decoded; and the dissector's schema tables must be those
 * tools/wireshark/gen-schema.py makes from schema/tickbus.xml today.
 * Skips (77) without tshark.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include "bus/frame.h"
#include "bus/recovery/proto.h"
#include "bus/transport/control.h"
#include "bus/transport/packet.h"
#include "tickbus_schema.h"

#include <arpa/inet.h>

#define LUA "tools/wireshark/tickbus.lua"

static char dir[128], pcap[256];

static void put(FILE *f, const void *p, size_t n)
{
	assert_int_equal(fwrite(p, 1, n, f), n);
}

/* One Ethernet/IPv4 packet of `proto` (17 udp, 6 tcp) from 10.0.0.1:sport
 * to 10.0.0.2:dport carrying `len` bytes. */
static void packet(FILE *f, int proto, uint16_t sport, uint16_t dport,
		   const void *data, size_t len, uint32_t tcp_seq)
{
	uint8_t hdr[14 + 20 + 20] = {0};
	size_t l4 = proto == 17 ? 8 : 20, n = 14 + 20 + l4 + len;
	uint32_t rec[4] = {1700000000, 0, (uint32_t)n, (uint32_t)n};
	uint16_t iplen = htons((uint16_t)(20 + l4 + len));

	memcpy(hdr, "\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00", 14);
	hdr[14] = 0x45;
	memcpy(hdr + 16, &iplen, 2);
	hdr[22] = 64;
	hdr[23] = (uint8_t)proto;
	memcpy(hdr + 26, "\x0a\0\0\x01\x0a\0\0\x02", 8);
	hdr[34] = (uint8_t)(sport >> 8);
	hdr[35] = (uint8_t)sport;
	hdr[36] = (uint8_t)(dport >> 8);
	hdr[37] = (uint8_t)dport;
	if (proto == 17) {
		uint16_t ulen = htons((uint16_t)(8 + len));

		memcpy(hdr + 38, &ulen, 2);
	} else {
		uint32_t s = htonl(tcp_seq);

		memcpy(hdr + 38, &s, 4);
		hdr[46] = 0x50; /* 20-byte header */
		hdr[47] = 0x18; /* PSH, ACK */
		hdr[48] = 0xff;
		hdr[49] = 0xff;
	}
	put(f, rec, sizeof(rec));
	put(f, hdr, 14 + 20 + l4);
	put(f, data, len);
}

/* A datagram of `n` Quotes from `seq`; returns its length. */
static size_t datagram(uint8_t *buf, uint64_t seq, int n, uint8_t version)
{
	size_t off = TB_PACKET_HDR_LEN;

	memset(buf, 0, 1024);
	for (int i = 0; i < n; i++) {
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)(buf + off);
		tb_md_quote_t q;
		int64_t len;

		tb_md_quote_init(&q);
		q.instrument_id = 42 + (uint32_t)i;
		q.bid_px.mantissa = 101250000000ll + i;
		q.bid_qty = 300;
		q.ask_px.mantissa = -5;
		q.ask_qty = 7;
		q.exchange_ts = 1700000000123456789ull;
		len = tb_md_quote_encode(buf + off + TB_FRAME_HDR_LEN, 512, &q);
		assert_true(len > 0);
		tb_frame_init(f, (uint32_t)len, TB_MD_QUOTE_TEMPLATE_ID, 9,
			      seq + (uint64_t)i, 5550000 + (uint64_t)i);
		off += tb_frame_space(f->length);
	}
	tb_packet_init((tb_packet_hdr_t *)buf, 0, 9, 3, seq, (uint16_t)n,
		       (uint32_t)off);
	((tb_packet_hdr_t *)buf)->version = version;
	return off;
}

static void write_capture(void)
{
	static const uint8_t ghdr[24] = {0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0,
					 0, 0, 0, 0, 0, 0, 0, 0,
					 0xff, 0xff, 0, 0, 1, 0, 0, 0};
	uint8_t buf[1024];
	tb_packet_hdr_t beat;
	tb_control_hello_t hello = {.stream_id = 9};
	tb_control_subscribe_t sub = {0};
	tb_recovery_proto_hello_t rhello = {.stream_id = 9};
	tb_recovery_proto_request_t req = {.stream_id = 9, .count = 100,
					   .epoch = 3, .first = 1000};
	size_t n;
	int len, len2;
	FILE *f = fopen(pcap, "wb");

	assert_non_null(f);
	put(f, ghdr, sizeof(ghdr));
	n = datagram(buf, 77, 2, TB_PACKET_VERSION);
	packet(f, 17, 40000, 30001, buf, n, 0);
	tb_packet_init(&beat, TB_PACKET_F_HEARTBEAT, 9, 3, 79, 0,
		       TB_PACKET_HDR_LEN);
	packet(f, 17, 40000, 30001, &beat, sizeof(beat), 0);
	n = datagram(buf, 500, 1, TB_PACKET_VERSION + 1);
	packet(f, 17, 40000, 30001, buf, n, 0);

	snprintf(hello.client_id, sizeof(hello.client_id), "strat-1");
	snprintf(hello.token, sizeof(hello.token), "s3cret");
	len = tb_control_encode_hello(buf, sizeof(buf), &hello);
	assert_true(len > 0);
	sub.stream_id = 9;
	sub.transport = TB_TRANSPORT_RC;
	sub.mtu = TB_CONTROL_MTU_4096;
	sub.ring_addr = 0x7f0000001000ull;
	sub.ring_len = 1 << 22;
	sub.rkey = 0x1234;
	sub.qpn = 0x99;
	sub.psn = 0x42;
	sub.recv_depth = 64;
	len2 = tb_control_encode_subscribe(buf + len, sizeof(buf) - (size_t)len,
					   &sub);
	if (len2 < 0)
		fail_msg("subscribe: %s", tb_errmsg());
	packet(f, 6, 40001, 17000, buf, (size_t)(len + len2), 1);
	snprintf(rhello.token, sizeof(rhello.token), "s3cret");
	len = tb_recovery_proto_encode_hello(buf, sizeof(buf), &rhello);
	assert_true(len > 0);
	len2 = tb_recovery_proto_encode_request(buf + len, sizeof(buf) - (size_t)len,
						&req);
	assert_true(len2 > 0);
	packet(f, 6, 40002, 17520, buf, (size_t)(len + len2), 1);
	fclose(f);
}

static char *tshark(const char *filter, const char *fields)
{
	char cmd[2048], out[256];
	proc_t p;

	snprintf(out, sizeof(out), "%s/tshark.out", dir);
	snprintf(cmd, sizeof(cmd), "tshark -n -X lua_script:" LUA " -r %s "
		 "-Y '%s' -T fields -E 'separator=|' %s >%s 2>%s.err", pcap,
		 filter,
		 fields, out, out);
	if (system(cmd) != 0) {
		snprintf(p.out, sizeof(p.out), "%s", out);
		fail_msg("%s: %s", cmd, proc_output(&p));
	}
	snprintf(p.out, sizeof(p.out), "%s", out);
	return proc_output(&p);
}

static void expect_out(const char *filter, const char *fields,
		       const char *want)
{
	char *got = tshark(filter, fields);

	if (strcmp(got, want))
		fail_msg("tshark -Y '%s' %s:\nexpected:\n%s\ngot:\n%s", filter,
			 fields, want, got);
	free(got);
}

static void test_udp_datagrams(void **state)
{
	(void)state;
	expect_out("tickbus.count == 2",
		   "-e tickbus.magic -e tickbus.version -e tickbus.stream_id "
		   "-e tickbus.epoch -e tickbus.first_seq -e tickbus.count "
		   "-e tickbus.length",
		   "0x5054|1|9|3|77|2|288\n");
	/* Each frame, and the Quote inside it. */
	expect_out("tickbus.count == 2",
		   "-e tickbus.seq -e tickbus.template_id -e tickbus.publish_ns "
		   "-e tickbus.frame.stream_id -e tickbus.md.message",
		   "77,78|2,2|5550000,5550001|9,9|Quote,Quote\n");
	expect_out("tickbus.count == 2",
		   "-e tickbus.md.Quote.instrumentId -e tickbus.md.Quote.bidPx "
		   "-e tickbus.md.Quote.bidQty -e tickbus.md.Quote.askPx "
		   "-e tickbus.md.Quote.exchangeTs",
		   "42,43|101250000000,101250000001|300,300|-5,-5|"
		   "1700000000123456789,1700000000123456789\n");
	/* The heartbeat: flags, no frame. */
	expect_out("tickbus.packet_flags == 1",
		   "-e tickbus.first_seq -e tickbus.count -e tickbus.seq",
		   "79|0|\n");
}

static void test_other_version_flagged(void **state)
{
	char *got;
	(void)state;

	got = tshark("tickbus.version == 2", "-e tickbus.version "
		     "-e tickbus.first_seq -e _ws.expert.message");
	if (!strstr(got, "2||packet version 2: this dissector knows 1"))
		fail_msg("got: %s", got);
	free(got);
}

static void test_tcp_protocols(void **state)
{
	(void)state;
	expect_out("tickbus.ctl.type",
		   "-e tickbus.ctl.type -e tickbus.stream_id "
		   "-e tickbus.ctl.client_id -e tickbus.token_len "
		   "-e tickbus.ctl.ring_addr -e tickbus.ctl.ring_len "
		   "-e tickbus.ctl.rkey -e tickbus.ctl.qpn",
		   "1,2|9,9|strat-1|6|0x00007f0000001000|4194304|0x00001234|"
		   "0x00000099\n");
	expect_out("tickbus.rec.type",
		   "-e tickbus.rec.type -e tickbus.stream_id -e tickbus.epoch "
		   "-e tickbus.rec.first -e tickbus.rec.count "
		   "-e tickbus.token_len",
		   "5,1|9,9|3|1000|100|6\n");
}

static void test_schema_tables_current(void **state)
{
	(void)state;
	assert_int_equal(system("/usr/bin/python3 tools/wireshark/gen-schema.py "
				"--check schema/tickbus.xml " LUA), 0);
}

static int setup(void **state)
{
	(void)state;
	if (system("command -v tshark >/dev/null 2>&1") != 0) {
		printf("skip: no tshark (apt-get install tshark)\n");
		exit(77);
	}
	if (scenario_dir_make(dir, sizeof(dir), "tb-wireshark") != 0)
		return -1;
	/* tshark wants a writable home for its profile. */
	setenv("HOME", dir, 1);
	snprintf(pcap, sizeof(pcap), "%s/tickbus.pcap", dir);
	write_capture();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_udp_datagrams),
		cmocka_unit_test(test_other_version_flagged),
		cmocka_unit_test(test_tcp_protocols),
		cmocka_unit_test(test_schema_tables_current),
	};

	return cmocka_run_group_tests_name("wireshark", tests, setup,
					   teardown);
}
