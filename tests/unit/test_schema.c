/*
 * test_schema.c - the code tb-schemagen generates from schema/tickbus.xml:
 * round trips of every message, null values, repeating groups, the text and
 * JSON printers, every kind of malformed message, and evolution both ways
 * (tickbus_schema.h is version 2, prefix tb_md; tickbus_schema_v1.h is the
 * same schema as a version-1 peer sees it, prefix tb_v1).  The generator's
 * other paths (composites that are not prices, char enums, signed and char
 * scalars, two groups, a group and a message of version 2) are tested
 * through tests/schema/features.xml (tbf_schema.h and tbf_schema_v1.h).
 *
 * Malformed input is decoded from a heap buffer of exactly its length, so
 * that under ASan (make test SAN=1) any read past the end fails the test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tbf_schema.h"
#include "tbf_schema_v1.h"
#include "tickbus_schema.h"
#include "tickbus_schema_v1.h"

#include <stdlib.h>
#include <string.h>

static uint8_t buf[4096];
static uint8_t buf2[4096];
static char text[4096];

/* A copy of src[0..len) in a heap block of exactly len bytes. */
static uint8_t *exact(const void *src, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	assert_non_null(p);
	memcpy(p, src, len);
	return p;
}

static void fill(void *p, size_t n, uint32_t seed)
{
	uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		b[i] = (uint8_t)(seed >> 16);
	}
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* ------------------------------------------------------------ round trips */

/*
 * For a message without groups: random bytes in every field, encode, check
 * the header bytes, decode (which must consume exactly what was written and
 * give back every field), encode again (same bytes), and decode every
 * truncation of it (each must fail with ESHORT, reading nothing past it).
 */
#define ROUND_TRIP(name, NAME, seed)                                          \
	do {                                                                  \
		tb_md_##name##_t m, d;                                        \
		int64_t n, n2;                                                \
		size_t cut;                                                   \
                                                                              \
		fill(&m, sizeof(m), seed);                                    \
		n = tb_md_##name##_encode(buf, sizeof(buf), &m);              \
		assert_int_equal(n, tb_md_##name##_encoded_len());            \
		assert_int_equal(n, TB_MD_HEADER_LEN + TB_MD_##NAME##_BLOCK_LENGTH); \
		assert_int_equal(rd16(buf), TB_MD_##NAME##_BLOCK_LENGTH);     \
		assert_int_equal(rd16(buf + 2), TB_MD_##NAME##_TEMPLATE_ID);  \
		assert_int_equal(rd16(buf + 4), TB_MD_SCHEMA_ID);             \
		assert_int_equal(rd16(buf + 6), TB_MD_SCHEMA_VERSION);        \
		for (cut = 0; cut < (size_t)n; cut++) {                       \
			uint8_t *p = exact(buf, cut);                         \
			assert_int_equal(tb_md_##name##_decode(p, cut, &d),   \
					 TB_MD_ESHORT);                       \
			free(p);                                              \
		}                                                             \
		{                                                             \
			uint8_t *p = exact(buf, (size_t)n);                   \
			assert_int_equal(tb_md_##name##_decode(p, (size_t)n, &d), n); \
			assert_memory_equal(&d, buf + TB_MD_HEADER_LEN, sizeof(d)); \
			free(p);                                              \
		}                                                             \
		n2 = tb_md_##name##_encode(buf2, sizeof(buf2), &d);           \
		assert_int_equal(n2, n);                                      \
		assert_memory_equal(buf, buf2, (size_t)n);                    \
		assert_int_equal(tb_md_##name##_encode(buf2, (size_t)n - 1, &d), \
				 TB_MD_ENOSPACE);                             \
	} while (0)

static void every_message_round_trips(void **state)
{
	(void)state;
	ROUND_TRIP(heartbeat, HEARTBEAT, 1);
	ROUND_TRIP(quote, QUOTE, 2);
	ROUND_TRIP(trade, TRADE, 3);
	ROUND_TRIP(instrument_definition, INSTRUMENT_DEFINITION, 5);
	ROUND_TRIP(trading_status, TRADING_STATUS, 6);
	ROUND_TRIP(snapshot_begin, SNAPSHOT_BEGIN, 7);
	ROUND_TRIP(snapshot_end, SNAPSHOT_END, 8);
	ROUND_TRIP(order, ORDER, 9);
	ROUND_TRIP(order_ack, ORDER_ACK, 10);
}

static void quote_fields_survive(void **state)
{
	tb_md_quote_t q, d;
	int64_t n;

	(void)state;
	tb_md_quote_init(&q);
	q.instrument_id = 42;
	q.bid_px.mantissa = 101250000000;   /* 101.25 */
	q.bid_qty = 300;
	q.ask_px.mantissa = 101260000000;
	q.ask_qty = 200;
	q.exchange_ts = 1700000000000000001ull;
	q.feed_recv_ts = 1700000000000000002ull;
	q.bid_orders = 3;
	q.ask_orders = 4;
	n = tb_md_quote_encode(buf, sizeof(buf), &q);
	assert_int_equal(n, 8 + 64);
	/* Wire layout: the bid price mantissa is little-endian at 8 + 8. */
	assert_int_equal(buf[16], 101250000000 & 0xff);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &d), n);
	assert_int_equal(d.instrument_id, 42);
	assert_int_equal(d.bid_px.mantissa, 101250000000);
	assert_int_equal(d.bid_qty, 300);
	assert_int_equal(d.ask_px.mantissa, 101260000000);
	assert_int_equal(d.ask_qty, 200);
	assert_int_equal(d.exchange_ts, 1700000000000000001ull);
	assert_int_equal(d.feed_recv_ts, 1700000000000000002ull);
	assert_int_equal(d.bid_orders, 3);
	assert_int_equal(d.ask_orders, 4);
	assert_int_equal(TB_MD_PRICE_EXPONENT, -9);
}

/* ------------------------------------------------------------------ nulls */

static void init_sets_every_null(void **state)
{
	tb_md_quote_t q;
	tb_md_order_ack_t a;
	tb_md_instrument_definition_t def;
	tb_md_book_level_update_levels_entry_t e;

	(void)state;
	tb_md_quote_init(&q);
	assert_int_equal(q.instrument_id, TB_MD_INSTRUMENT_ID_NULL);
	assert_int_equal(q.instrument_id, 0);  /* nullValue="0" in the XML */
	assert_true(q.bid_px.mantissa == INT64_MIN);
	assert_true(q.bid_qty == UINT64_MAX);
	assert_true(q.exchange_ts == TB_MD_TIMESTAMP_NULL);
	assert_int_equal(q.bid_orders, UINT32_MAX); /* optional: type's null */
	tb_md_order_ack_init(&a);
	assert_int_equal(a.status, TB_MD_ORD_STATUS_NULL);
	assert_int_equal(a.status, 255);
	assert_int_equal(a.reject_code, TB_MD_REJECT_CODE_NULL);
	tb_md_instrument_definition_init(&def);
	assert_int_equal(def.symbol[0], 0);
	assert_int_equal(def.state, TB_MD_TRADING_STATE_NULL);
	tb_md_book_level_update_levels_entry_init(&e);
	assert_int_equal(e.action, TB_MD_BOOK_ACTION_NULL);
	assert_true(e.price.mantissa == TB_MD_PRICE_MANTISSA_NULL);
}

static void nulls_print_as_null(void **state)
{
	tb_md_quote_t q;
	int64_t n;
	int len;

	(void)state;
	tb_md_quote_init(&q);
	q.instrument_id = 7;
	q.bid_px.mantissa = 99500000000;
	q.bid_qty = 10;
	n = tb_md_quote_encode(buf, sizeof(buf), &q);
	len = tb_md_print(buf, (size_t)n, text, sizeof(text));
	assert_int_equal(len, (int)strlen(text));
	assert_string_equal(text,
		"Quote instrumentId=7 bidPx=99.500000000 bidQty=10 askPx=null "
		"askQty=null exchangeTs=null feedRecvTs=null bidOrders=null "
		"askOrders=null");
	len = tb_md_json(buf, (size_t)n, text, sizeof(text));
	assert_int_equal(len, (int)strlen(text));
	assert_string_equal(text,
		"{\"type\":\"Quote\",\"instrumentId\":7,\"bidPx\":99.500000000,"
		"\"bidQty\":10,\"askPx\":null,\"askQty\":null,\"exchangeTs\":null,"
		"\"feedRecvTs\":null,\"bidOrders\":null,\"askOrders\":null}");
}

/* ----------------------------------------------------------------- groups */

static int64_t encode_book(uint16_t nlev, tb_md_book_level_update_levels_entry_t *lv)
{
	tb_md_book_level_update_t m;
	uint16_t i;

	tb_md_book_level_update_init(&m);
	m.instrument_id = 9;
	m.exchange_ts = 1000;
	m.feed_recv_ts = 2000;
	for (i = 0; i < nlev; i++) {
		tb_md_book_level_update_levels_entry_init(&lv[i]);
		lv[i].action = (uint8_t)(i % 3);
		lv[i].side = i & 1 ? TB_MD_SIDE_SELL : TB_MD_SIDE_BUY;
		lv[i].level = (uint8_t)i;
		lv[i].price.mantissa = -1500000000 + (int64_t)i * 10000000; /* -1.5 + i/100 */
		lv[i].qty = 100u * (i + 1u);
		lv[i].order_count = i + 1u;
	}
	return tb_md_book_level_update_encode(buf, sizeof(buf), &m, lv, nlev);
}

static void groups_round_trip(void **state)
{
	tb_md_book_level_update_levels_entry_t lv[5], e;
	tb_md_book_level_update_t d;
	tb_md_book_level_update_groups_t g;
	uint16_t counts[] = {0, 1, 5};
	size_t c;

	(void)state;
	for (c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		uint16_t nlev = counts[c], i = 0;
		int64_t n = encode_book(nlev, lv);

		assert_int_equal(n, (int64_t)tb_md_book_level_update_encoded_len(nlev));
		assert_int_equal(n, 8 + 24 + 4 + 28 * nlev);
		assert_int_equal(rd16(buf + 32), 28);    /* group blockLength */
		assert_int_equal(rd16(buf + 34), nlev);  /* numInGroup */
		assert_int_equal(tb_md_book_level_update_decode(buf, (size_t)n, &d, &g), n);
		assert_int_equal(d.instrument_id, 9);
		assert_int_equal(d.exchange_ts, 1000);
		assert_int_equal(g.levels.count, nlev);
		while (tb_md_book_level_update_levels_next(&g.levels, &e)) {
			assert_true(i < nlev);
			assert_memory_equal(&e, &lv[i], sizeof(e));
			i++;
		}
		assert_int_equal(i, nlev);
		/* An exhausted iterator stays at its end. */
		assert_int_equal(tb_md_book_level_update_levels_next(&g.levels, &e), 0);
	}
}

static void group_prints_as_list(void **state)
{
	tb_md_book_level_update_levels_entry_t lv[2];
	int64_t n;

	(void)state;
	n = encode_book(2, lv);
	assert_true(tb_md_print(buf, (size_t)n, text, sizeof(text)) > 0);
	assert_string_equal(text,
		"BookLevelUpdate instrumentId=9 exchangeTs=1000 feedRecvTs=2000 "
		"levels=[{action=Add side=Buy level=0 price=-1.500000000 qty=100 "
		"orderCount=1} {action=Modify side=Sell level=1 "
		"price=-1.490000000 qty=200 orderCount=2}]");
	assert_true(tb_md_json(buf, (size_t)n, text, sizeof(text)) > 0);
	assert_string_equal(text,
		"{\"type\":\"BookLevelUpdate\",\"instrumentId\":9,\"exchangeTs\":1000,"
		"\"feedRecvTs\":2000,\"levels\":[{\"action\":\"Add\",\"side\":\"Buy\","
		"\"level\":0,\"price\":-1.500000000,\"qty\":100,\"orderCount\":1},"
		"{\"action\":\"Modify\",\"side\":\"Sell\",\"level\":1,"
		"\"price\":-1.490000000,\"qty\":200,\"orderCount\":2}]}");
}

/* ------------------------------------------------------------- printers */

static void printer_edge_cases(void **state)
{
	tb_md_instrument_definition_t def;
	tb_md_trade_t t;
	int64_t n;
	int len;

	(void)state;
	tb_md_instrument_definition_init(&def);
	def.instrument_id = 1;
	memcpy(def.symbol, "A \"B\"\\C", 7);  /* space, quotes, backslash */
	memcpy(def.currency, "USD", 3);         /* fills it: no NUL */
	def.tick_size.mantissa = 5000000;       /* 0.005 */
	def.lot_size = 100;
	def.state = TB_MD_TRADING_STATE_HALTED;
	n = tb_md_instrument_definition_encode(buf, sizeof(buf), &def);
	assert_true(n > 0);
	tb_md_print(buf, (size_t)n, text, sizeof(text));
	assert_string_equal(text,
		"InstrumentDefinition instrumentId=1 symbol=A\\x20\"B\"\\x5cC "
		"currency=USD tickSize=0.005000000 lotSize=100 state=Halted");
	tb_md_json(buf, (size_t)n, text, sizeof(text));
	assert_string_equal(text,
		"{\"type\":\"InstrumentDefinition\",\"instrumentId\":1,"
		"\"symbol\":\"A \\\"B\\\"\\\\C\",\"currency\":\"USD\","
		"\"tickSize\":0.005000000,\"lotSize\":100,\"state\":\"Halted\"}");

	/* An enum value the schema does not know prints as its number; the
	 * smallest price prints without overflow. */
	tb_md_trade_init(&t);
	t.aggressor_side = 77;
	t.price.mantissa = INT64_MIN + 1;
	n = tb_md_trade_encode(buf, sizeof(buf), &t);
	tb_md_print(buf, (size_t)n, text, sizeof(text));
	assert_non_null(strstr(text, " aggressorSide=77"));
	assert_non_null(strstr(text, " price=-9223372036.854775807 "));

	/* Truncation: the length needed comes back, the output ends in NUL. */
	len = tb_md_print(buf, (size_t)n, text, 10);
	assert_true(len > 10);
	assert_int_equal(strlen(text), 9);
	assert_int_equal(tb_md_print(buf, (size_t)n, text, 0), len);
}

static void names_and_errors(void **state)
{
	(void)state;
	assert_string_equal(tb_md_template_name(TB_MD_QUOTE_TEMPLATE_ID), "Quote");
	assert_string_equal(tb_md_template_name(10), "OrderAck");
	assert_null(tb_md_template_name(0));
	assert_null(tb_md_template_name(999));
	assert_string_equal(tb_md_side_name(TB_MD_SIDE_SELL), "Sell");
	assert_null(tb_md_side_name(3));
	assert_non_null(strstr(tb_md_strerror(TB_MD_EGROUP), "group"));
	assert_non_null(strstr(tb_md_strerror(TB_MD_ETEMPLATE), "template"));
	assert_string_equal(tb_md_strerror(0), "ok");
}

/* -------------------------------------------------------------- malformed */

static void short_header_is_rejected(void **state)
{
	tb_md_message_header_t h;
	tb_md_heartbeat_t hb;
	size_t len;

	(void)state;
	tb_md_heartbeat_init(&hb);
	assert_int_equal(tb_md_heartbeat_encode(buf, sizeof(buf), &hb), 16);
	for (len = 0; len < TB_MD_HEADER_LEN; len++) {
		uint8_t *p = exact(buf, len);

		assert_int_equal(tb_md_header_decode(p, len, &h), TB_MD_ESHORT);
		assert_int_equal(tb_md_print(p, len, text, sizeof(text)), TB_MD_ESHORT);
		assert_string_equal(text, "");
		assert_int_equal(tb_md_heartbeat_decode(p, len, &hb), TB_MD_ESHORT);
		free(p);
	}
}

static void block_length_too_small_is_rejected(void **state)
{
	tb_md_quote_t q;
	tb_v1_quote_t q1;
	int64_t n;

	(void)state;
	tb_md_quote_init(&q);
	n = tb_md_quote_encode(buf, sizeof(buf), &q);
	/* A version-2 Quote must hold 64 bytes: 63 is malformed. */
	wr16(buf, 63);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), TB_MD_EBLOCK);
	assert_int_equal(tb_v1_quote_decode(buf, (size_t)n, &q1), 0 + 8 + 63);
	/* Claiming version 1, 56 bytes are enough for both decoders... */
	wr16(buf, 56);
	wr16(buf + 6, 1);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), 8 + 56);
	/* ... and 55 for neither. */
	wr16(buf, 55);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), TB_MD_EBLOCK);
	assert_int_equal(tb_v1_quote_decode(buf, (size_t)n, &q1), TB_V1_EBLOCK);
	assert_int_equal(tb_md_print(buf, (size_t)n, text, sizeof(text)), TB_MD_EBLOCK);
	/* A block longer than the buffer. */
	wr16(buf, 64);
	wr16(buf + 6, 2);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n - 1, &q), TB_MD_ESHORT);
	wr16(buf, 65000);
	assert_int_equal(tb_md_quote_decode(buf, sizeof(buf), &q), TB_MD_ESHORT);
}

static void bad_groups_are_rejected(void **state)
{
	tb_md_book_level_update_levels_entry_t lv[3];
	tb_md_book_level_update_t d;
	tb_md_book_level_update_groups_t g;
	int64_t n = encode_book(3, lv);
	size_t cut;
	uint8_t *p;

	(void)state;
	/* Count one past the end: the entries would run past the buffer. */
	wr16(buf + 34, 4);
	p = exact(buf, (size_t)n);
	assert_int_equal(tb_md_book_level_update_decode(p, (size_t)n, &d, &g), TB_MD_EGROUP);
	assert_int_equal(tb_md_json(p, (size_t)n, text, sizeof(text)), TB_MD_EGROUP);
	free(p);
	wr16(buf + 34, 65535);
	assert_int_equal(tb_md_book_level_update_decode(buf, (size_t)n, &d, &g), TB_MD_EGROUP);
	wr16(buf + 34, 3);
	/* Entries shorter than a version-2 level. */
	wr16(buf + 32, 27);
	assert_int_equal(tb_md_book_level_update_decode(buf, (size_t)n, &d, &g), TB_MD_EBLOCK);
	/* ... unless the group is empty: then its block length is not used. */
	wr16(buf + 34, 0);
	assert_int_equal(tb_md_book_level_update_decode(buf, 36, &d, &g), 36);
	assert_int_equal(g.levels.count, 0);
	wr16(buf + 32, 28);
	wr16(buf + 34, 3);
	/* Every truncation fails: in the block (ESHORT), in the group header
	 * or the entries (EGROUP). */
	for (cut = 0; cut < (size_t)n; cut++) {
		int64_t rc;

		p = exact(buf, cut);
		rc = tb_md_book_level_update_decode(p, cut, &d, &g);
		assert_int_equal(rc, cut < 32 ? TB_MD_ESHORT : TB_MD_EGROUP);
		free(p);
	}
}

/* A decode that fails in a group leaves the message zeroed and no group
 * entries, as one that fails in the header does (found by fuzz_schema: a
 * BookLevelUpdate whose group header is cut, or whose entries run past
 * the end, came back with its block fields filled). */
static void failed_group_decode_leaves_nothing(void **state)
{
	static const uint8_t zero[sizeof(tb_md_book_level_update_t) +
				  sizeof(tb_md_book_level_update_groups_t)];
	tb_md_book_level_update_levels_entry_t lv[3];
	tb_md_book_level_update_t d;
	tb_md_book_level_update_groups_t g;
	int64_t n = encode_book(3, lv);
	struct {
		size_t len;
		size_t at;
		uint16_t value;
		int64_t rc;
	} cases[] = {
		{34, 0, 0, TB_MD_EGROUP},  /* the group header cut */
		{0, 34, 4, TB_MD_EGROUP},  /* one entry too many */
		{0, 32, 27, TB_MD_EBLOCK}, /* entries too short */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p;
		size_t len = cases[i].len ? cases[i].len : (size_t)n;

		encode_book(3, lv);
		if (cases[i].at)
			wr16(buf + cases[i].at, cases[i].value);
		p = exact(buf, len);
		memset(&d, 0xaa, sizeof(d));
		memset(&g, 0xaa, sizeof(g));
		assert_int_equal(tb_md_book_level_update_decode(p, len, &d, &g),
				 cases[i].rc);
		assert_memory_equal(&d, zero, sizeof(d));
		assert_memory_equal(&g, zero, sizeof(g));
		free(p);
	}
}

static void wrong_ids_are_rejected(void **state)
{
	tb_md_quote_t q;
	tb_md_trade_t t;
	int64_t n;

	(void)state;
	tb_md_quote_init(&q);
	n = tb_md_quote_encode(buf, sizeof(buf), &q);
	/* A Quote is not a Trade. */
	assert_int_equal(tb_md_trade_decode(buf, (size_t)n, &t), TB_MD_ETEMPLATE);
	/* An unknown template. */
	wr16(buf + 2, 999);
	assert_int_equal(tb_md_print(buf, (size_t)n, text, sizeof(text)), TB_MD_ETEMPLATE);
	assert_string_equal(text, "");
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), TB_MD_ETEMPLATE);
	wr16(buf + 2, TB_MD_QUOTE_TEMPLATE_ID);
	/* Another schema. */
	wr16(buf + 4, TB_MD_SCHEMA_ID + 1);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), TB_MD_ESCHEMA);
	assert_int_equal(tb_md_json(buf, (size_t)n, text, sizeof(text)), TB_MD_ESCHEMA);
	wr16(buf + 4, TB_MD_SCHEMA_ID);
	/* Version 0 does not exist. */
	wr16(buf + 6, 0);
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), TB_MD_EVERSION);
}

static void garbage_never_reads_past_the_end(void **state)
{
	tb_md_book_level_update_t d;
	tb_md_book_level_update_groups_t g;
	tb_md_book_level_update_levels_entry_t e;
	uint32_t seed;

	(void)state;
	/* Random bytes with a plausible header: decoders and printers must
	 * answer without reading outside the exact-size buffer (ASan). */
	for (seed = 1; seed <= 3000; seed++) {
		size_t len = seed % 200;
		uint8_t *p;

		fill(buf, len, seed);
		if (len >= 8) {
			wr16(buf + 2, (uint16_t)(1 + seed % 11));
			wr16(buf + 4, TB_MD_SCHEMA_ID);
			wr16(buf + 6, (uint16_t)(1 + seed % 3));
			wr16(buf, (uint16_t)(rd16(buf) % 80));
		}
		if (len >= 36 && seed % 2)
			wr16(buf + 34, (uint16_t)(seed % 7));
		p = exact(buf, len);
		tb_md_print(p, len, text, sizeof(text));
		tb_md_json(p, len, text, sizeof(text));
		tb_v1_print(p, len, text, sizeof(text));
		if (tb_md_book_level_update_decode(p, len, &d, &g) > 0)
			while (tb_md_book_level_update_levels_next(&g.levels, &e))
				;
		free(p);
	}
}

/* -------------------------------------------------------------- evolution */

static void v2_message_read_by_v1(void **state)
{
	tb_md_quote_t q;
	tb_v1_quote_t q1;
	tb_md_trade_t t;
	tb_v1_trade_t t1;
	tb_md_book_level_update_levels_entry_t lv[3];
	tb_v1_book_level_update_t b1;
	tb_v1_book_level_update_groups_t g1;
	tb_v1_book_level_update_levels_entry_t e1;
	int64_t n;
	int i = 0;

	(void)state;
	assert_int_equal(TB_V1_SCHEMA_VERSION, 1);
	assert_int_equal(sizeof(tb_v1_quote_t), 56);
	assert_int_equal(sizeof(tb_md_quote_t), 64);

	tb_md_quote_init(&q);
	q.instrument_id = 5;
	q.bid_px.mantissa = 1;
	q.ask_qty = 77;
	q.feed_recv_ts = 123;
	q.bid_orders = 8;
	n = tb_md_quote_encode(buf, sizeof(buf), &q);
	/* The old decoder skips the 8 bytes it does not know. */
	assert_int_equal(tb_v1_quote_decode(buf, (size_t)n, &q1), n);
	assert_int_equal(q1.instrument_id, 5);
	assert_int_equal(q1.bid_px.mantissa, 1);
	assert_int_equal(q1.ask_qty, 77);
	assert_int_equal(q1.feed_recv_ts, 123);
	assert_memory_equal(&q1, &q, sizeof(q1));
	tb_v1_print(buf, (size_t)n, text, sizeof(text));
	assert_null(strstr(text, "bidOrders"));
	assert_non_null(strstr(text, " askQty=77 "));

	tb_md_trade_init(&t);
	t.trade_id = 99;
	t.aggressor_side = TB_MD_SIDE_SELL;
	n = tb_md_trade_encode(buf, sizeof(buf), &t);
	assert_int_equal(n, 8 + 49);
	assert_int_equal(tb_v1_trade_decode(buf, (size_t)n, &t1), n);
	assert_int_equal(t1.trade_id, 99);

	/* Group entries of 28 bytes, read by code that knows 24. */
	n = encode_book(3, lv);
	assert_int_equal(tb_v1_book_level_update_decode(buf, (size_t)n, &b1, &g1), n);
	assert_int_equal(b1.instrument_id, 9);
	assert_int_equal(g1.levels.count, 3);
	while (tb_v1_book_level_update_levels_next(&g1.levels, &e1)) {
		assert_int_equal(e1.level, lv[i].level);
		assert_int_equal(e1.side, lv[i].side);
		assert_int_equal(e1.price.mantissa, lv[i].price.mantissa);
		assert_int_equal(e1.qty, lv[i].qty);
		i++;
	}
	assert_int_equal(i, 3);
}

static void v1_message_read_by_v2(void **state)
{
	tb_v1_quote_t q1;
	tb_md_quote_t q;
	tb_v1_trade_t t1;
	tb_md_trade_t t;
	tb_v1_book_level_update_t b1;
	tb_v1_book_level_update_levels_entry_t lv1[2];
	tb_md_book_level_update_t b;
	tb_md_book_level_update_groups_t g;
	tb_md_book_level_update_levels_entry_t e;
	int64_t n;
	int i;

	(void)state;
	tb_v1_quote_init(&q1);
	q1.instrument_id = 6;
	q1.ask_px.mantissa = 2000000000;
	n = tb_v1_quote_encode(buf, sizeof(buf), &q1);
	assert_int_equal(n, 8 + 56);
	assert_int_equal(rd16(buf + 6), 1);
	/* Fill the decode target with garbage: the new fields must come out
	 * null, not as leftovers. */
	memset(&q, 0x5a, sizeof(q));
	assert_int_equal(tb_md_quote_decode(buf, (size_t)n, &q), n);
	assert_int_equal(q.instrument_id, 6);
	assert_int_equal(q.ask_px.mantissa, 2000000000);
	assert_int_equal(q.bid_orders, UINT32_MAX);
	assert_int_equal(q.ask_orders, UINT32_MAX);
	tb_md_print(buf, (size_t)n, text, sizeof(text));
	assert_non_null(strstr(text, " askPx=2.000000000 "));
	assert_non_null(strstr(text, " bidOrders=null askOrders=null"));

	tb_v1_trade_init(&t1);
	t1.qty = 5;
	n = tb_v1_trade_encode(buf, sizeof(buf), &t1);
	memset(&t, 0, sizeof(t));
	assert_int_equal(tb_md_trade_decode(buf, (size_t)n, &t), n);
	assert_int_equal(t.qty, 5);
	assert_int_equal(t.aggressor_side, TB_MD_SIDE_NULL);

	tb_v1_book_level_update_init(&b1);
	b1.instrument_id = 3;
	for (i = 0; i < 2; i++) {
		tb_v1_book_level_update_levels_entry_init(&lv1[i]);
		lv1[i].action = TB_V1_BOOK_ACTION_DELETE;
		lv1[i].price.mantissa = 10 + i;
	}
	n = tb_v1_book_level_update_encode(buf, sizeof(buf), &b1, lv1, 2);
	assert_int_equal(n, 8 + 24 + 4 + 2 * 24);
	assert_int_equal(tb_md_book_level_update_decode(buf, (size_t)n, &b, &g), n);
	i = 0;
	memset(&e, 0x33, sizeof(e));
	while (tb_md_book_level_update_levels_next(&g.levels, &e)) {
		assert_int_equal(e.action, TB_MD_BOOK_ACTION_DELETE);
		assert_int_equal(e.price.mantissa, 10 + i);
		assert_int_equal(e.order_count, TB_MD_COUNT_NULL);
		i++;
	}
	assert_int_equal(i, 2);
}

/* A version-3 sender (not yet written) appends to the block and to each
 * entry: today's decoder reads what it knows and skips the rest. */
static void future_version_is_skipped(void **state)
{
	uint8_t m[8 + 72 + 4 + 2 * 32 + 16];
	tb_md_book_level_update_t b;
	tb_md_book_level_update_groups_t g;
	tb_md_book_level_update_levels_entry_t e;
	tb_md_quote_t q;
	int i;

	(void)state;
	memset(m, 0xee, sizeof(m));
	wr16(m, 72);
	wr16(m + 2, TB_MD_QUOTE_TEMPLATE_ID);
	wr16(m + 4, TB_MD_SCHEMA_ID);
	wr16(m + 6, 3);
	memset(m + 8, 0, 64);
	m[8] = 11;
	m[8 + 56] = 4; /* bidOrders */
	assert_int_equal(tb_md_quote_decode(m, 8 + 72 + 16, &q), 8 + 72);
	assert_int_equal(q.instrument_id, 11);
	assert_int_equal(q.bid_orders, 4);

	memset(m, 0, sizeof(m));
	wr16(m, 32);
	wr16(m + 2, TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID);
	wr16(m + 4, TB_MD_SCHEMA_ID);
	wr16(m + 6, 3);
	m[8] = 12;
	wr16(m + 8 + 32, 32);
	wr16(m + 8 + 32 + 2, 2);
	for (i = 0; i < 2; i++) {
		uint8_t *en = m + 8 + 32 + 4 + i * 32;

		en[2] = (uint8_t)(i + 1);     /* level */
		en[24] = (uint8_t)(7 + i);    /* orderCount */
		memset(en + 28, 0xff, 4);     /* a version-3 field */
	}
	assert_int_equal(tb_md_book_level_update_decode(m, 8 + 32 + 4 + 64, &b, &g),
			 8 + 32 + 4 + 64);
	assert_int_equal(b.instrument_id, 12);
	for (i = 0; tb_md_book_level_update_levels_next(&g.levels, &e); i++) {
		assert_int_equal(e.level, i + 1);
		assert_int_equal(e.order_count, 7 + i);
	}
	assert_int_equal(i, 2);
}


/* ------------------------------------------- the generator's other paths */

static int64_t encode_sample(int with_b)
{
	tbf_sample_t s;
	tbf_sample_as_entry_t as[2];
	tbf_sample_bs_entry_t bs[1];

	tbf_sample_init(&s);
	s.where.x = -5;
	s.where.y = 7;
	s.flag = TBF_FLAG_BETA;
	s.temp = -300;
	s.letter = 'z';
	s.small = 3;
	s.big = 123;
	tbf_sample_as_entry_init(&as[0]);
	tbf_sample_as_entry_init(&as[1]);
	as[0].v = 1;
	as[1].v = 2;
	tbf_sample_bs_entry_init(&bs[0]);
	bs[0].w = -9;
	return tbf_sample_encode(buf, sizeof(buf), &s, as, 2, bs, with_b ? 1 : 0);
}

static void other_types_round_trip(void **state)
{
	tbf_sample_t s;
	tbf_sample_groups_t g;
	int64_t n = encode_sample(1);

	(void)state;
	assert_int_equal(TBF_SAMPLE_BLOCK_LENGTH, 24);        /* blockLength="24" */
	assert_int_equal(TBF_SAMPLE_AS_BLOCK_LENGTH, 8);      /* room to spare */
	assert_int_equal(n, 8 + 24 + 4 + 2 * 8 + 4 + 4);
	assert_int_equal(tbf_sample_decode(buf, (size_t)n, &s, &g), n);
	assert_int_equal(s.where.x, -5);
	assert_int_equal(s.temp, -300);
	assert_int_equal(g.as.count, 2);
	assert_int_equal(g.bs.count, 1);
	tbf_print(buf, (size_t)n, text, sizeof(text));
	assert_string_equal(text, "Sample where={x=-5 y=7} flag=Beta temp=-300 "
			    "letter=z small=3 big=123 as=[{v=1} {v=2}] bs=[{w=-9}]");
	tbf_json(buf, (size_t)n, text, sizeof(text));
	assert_string_equal(text, "{\"type\":\"Sample\",\"where\":{\"x\":-5,\"y\":7},"
			    "\"flag\":\"Beta\",\"temp\":-300,\"letter\":\"z\","
			    "\"small\":3,\"big\":123,\"as\":[{\"v\":1},{\"v\":2}],"
			    "\"bs\":[{\"w\":-9}]}");

	tbf_sample_init(&s);
	n = tbf_sample_encode(buf, sizeof(buf), &s, NULL, 0, NULL, 0);
	tbf_print(buf, (size_t)n, text, sizeof(text));
	assert_string_equal(text, "Sample where={x=null y=null} flag=null "
			    "temp=null letter= small=null big=null as=[] bs=[]");
	assert_int_equal(s.small, -1);  /* nullValue="-1" */
	assert_int_equal(s.temp, INT16_MIN);
}

static void groups_and_messages_of_version_2(void **state)
{
	tbf1_sample_t s1;
	tbf1_sample_groups_t g1;
	tbf_sample_t s;
	tbf_sample_groups_t g;
	tbf1_sample_as_entry_t as1[1];
	tbf_later_t later;
	int64_t n = encode_sample(1);

	(void)state;
	/* A version-1 reader stops after the groups it knows: the bs group is
	 * left unread, and the message is no longer for it than that. */
	assert_int_equal(tbf1_sample_decode(buf, (size_t)n, &s1, &g1), 8 + 24 + 4 + 16);
	assert_int_equal(s1.temp, -300);
	assert_int_equal(sizeof(s1), 14);
	assert_int_equal(g1.as.count, 2);

	/* A version-1 sender has no bs group and no big: a version-2 reader
	 * sees them empty and null, and does not look for the group. */
	tbf1_sample_init(&s1);
	s1.temp = 4;
	tbf1_sample_as_entry_init(&as1[0]);
	as1[0].v = 6;
	n = tbf1_sample_encode(buf, sizeof(buf), &s1, as1, 1);
	assert_int_equal(n, 8 + 14 + 4 + 8);
	assert_int_equal(tbf_sample_decode(buf, (size_t)n, &s, &g), n);
	assert_int_equal(s.temp, 4);
	assert_true(s.big == INT64_MIN);
	assert_int_equal(g.as.count, 1);
	assert_int_equal(g.bs.count, 0);

	/* A message of version 2 is unknown to version-1 code. */
	tbf_later_init(&later);
	later.n = 1;
	n = tbf_later_encode(buf, sizeof(buf), &later);
	assert_string_equal(tbf_template_name(TBF_LATER_TEMPLATE_ID), "Later");
	assert_null(tbf1_template_name(TBF_LATER_TEMPLATE_ID));
	assert_int_equal(tbf1_print(buf, (size_t)n, text, sizeof(text)), TBF1_ETEMPLATE);
	/* Another schema id is not this schema's message. */
	assert_int_equal(tb_md_print(buf, (size_t)n, text, sizeof(text)), TB_MD_ESCHEMA);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_message_round_trips),
		cmocka_unit_test(quote_fields_survive),
		cmocka_unit_test(init_sets_every_null),
		cmocka_unit_test(nulls_print_as_null),
		cmocka_unit_test(groups_round_trip),
		cmocka_unit_test(group_prints_as_list),
		cmocka_unit_test(printer_edge_cases),
		cmocka_unit_test(names_and_errors),
		cmocka_unit_test(short_header_is_rejected),
		cmocka_unit_test(block_length_too_small_is_rejected),
		cmocka_unit_test(bad_groups_are_rejected),
		cmocka_unit_test(failed_group_decode_leaves_nothing),
		cmocka_unit_test(wrong_ids_are_rejected),
		cmocka_unit_test(garbage_never_reads_past_the_end),
		cmocka_unit_test(v2_message_read_by_v1),
		cmocka_unit_test(v1_message_read_by_v2),
		cmocka_unit_test(future_version_is_skipped),
		cmocka_unit_test(other_types_round_trip),
		cmocka_unit_test(groups_and_messages_of_version_2),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
