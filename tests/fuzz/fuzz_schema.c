/*
 * fuzz_schema.c - libFuzzer target for the generated market-data codecs
 * (build/gen/tickbus_schema.h, from schema/tickbus.xml): every message's
 * decode, its text and JSON print, and its encode.
 *
 * The input is one message as a subscriber receives it in a frame's
 * payload.  It is printed by tb_md_print and tb_md_json (the generated
 * dispatch over every template), then decoded by the decoder of the
 * template its header names, and of the input with its template id forced
 * to each template in turn (so that every decoder sees every input, not
 * only the one its header asks for).
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - a decode returns a length within the input or a TB_MD_E* code; a
 *     failed decode leaves the message zeroed and no group entries, as the
 *     generated header promises;
 *   - printing returns the length it needs, writes a NUL-terminated prefix
 *     of the whole text into any smaller buffer, and the text is safe to
 *     print (no control character, only well-formed UTF-8);
 *   - encode(decode(x)) decodes again to a message that prints the same:
 *     what a receiver takes from a message survives being sent on;
 *   - every template the schema names is covered here (a new message in
 *     the schema fails this target until it is added below).
 */
#include "tests/fuzz/fuzz_util.h"
#include "tickbus_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_MAX 65536
#define ENC_MAX (TB_MD_HEADER_LEN + 65536)
#define TEMPLATES 10

static char full[TEXT_MAX], part[TEXT_MAX], again[TEXT_MAX];
static uint8_t enc[ENC_MAX];

static int all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* tb_md_format into `full`, then into smaller buffers: same length asked
 * for, a prefix written, always terminated. */
static void check_print(const uint8_t *buf, size_t len, int json)
{
	int n = tb_md_format(buf, len, json, full, sizeof(full));
	size_t caps[] = {0, 1, 7, 40};

	if (n < 0) {
		if (full[0] != '\0' || tb_md_strerror(n) == NULL)
			abort();
		return;
	}
	if ((size_t)n >= sizeof(full) || strlen(full) != (size_t)n ||
	    !fuzz_text_safe(full))
		abort();
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		size_t cap = caps[i];

		memset(part, 'x', cap + 1);
		if (tb_md_format(buf, len, json, part, cap) != n)
			abort();
		if (cap == 0) {
			if (part[0] != 'x')
				abort(); /* nothing written into no room */
			continue;
		}
		if (strlen(part) >= cap ||
		    memcmp(part, full, strlen(part)) != 0)
			abort();
	}
}

/* The decode of every template but the one with groups: on failure a
 * zeroed message; on success a length within the input, and the message
 * encoded, decoded again and printed is the same text. */
#define ROUND_TRIP(name)                                                      \
	do {                                                                  \
		tb_md_##name##_t m, m2;                                       \
		int64_t rc = tb_md_##name##_decode(buf, len, &m), rc2, e;    \
                                                                              \
		if (rc < 0) {                                                 \
			if (!all_zero(&m, sizeof(m)) || !tb_md_strerror((int)rc)) \
				abort();                                      \
			break;                                                \
		}                                                             \
		if ((size_t)rc > len || rc < TB_MD_HEADER_LEN)                \
			abort();                                              \
		e = tb_md_##name##_encode(enc, sizeof(enc), &m);              \
		if (e != (int64_t)tb_md_##name##_encoded_len())              \
			abort();                                              \
		rc2 = tb_md_##name##_decode(enc, (size_t)e, &m2);             \
		if (rc2 != e)                                                 \
			abort();                                              \
		tb_md_##name##_print(&m, full, sizeof(full));                 \
		tb_md_##name##_print(&m2, again, sizeof(again));              \
		if (strcmp(full, again) != 0)                                 \
			abort();                                              \
	} while (0)

static void book_round_trip(const uint8_t *buf, size_t len)
{
	static tb_md_book_level_update_levels_entry_t levels[65535];
	tb_md_book_level_update_t m, m2;
	tb_md_book_level_update_groups_t g, g2;
	int64_t rc = tb_md_book_level_update_decode(buf, len, &m, &g), rc2, e;
	uint16_t n = 0;

	if (rc < 0) {
		if (!all_zero(&m, sizeof(m)) || !all_zero(&g, sizeof(g)))
			abort();
		return;
	}
	if ((size_t)rc > len || rc < TB_MD_HEADER_LEN)
		abort();
	/* The iterator reads only inside what decode checked. */
	tb_md_book_level_update_print(&m, &g, full, sizeof(full));
	while (tb_md_book_level_update_levels_next(&g.levels, &levels[n]))
		n++;
	if (n != g.levels.count)
		abort();
	e = tb_md_book_level_update_encode(enc, sizeof(enc), &m, levels, n);
	if (e != (int64_t)tb_md_book_level_update_encoded_len(n))
		abort();
	rc2 = tb_md_book_level_update_decode(enc, (size_t)e, &m2, &g2);
	if (rc2 != e)
		abort();
	g.levels.index = 0;
	tb_md_book_level_update_print(&m, &g, full, sizeof(full));
	tb_md_book_level_update_print(&m2, &g2, again, sizeof(again));
	if (strcmp(full, again) != 0)
		abort();
}

static void decode_as(int template_id, const uint8_t *buf, size_t len)
{
	switch (template_id) {
	case TB_MD_HEARTBEAT_TEMPLATE_ID: ROUND_TRIP(heartbeat); break;
	case TB_MD_QUOTE_TEMPLATE_ID: ROUND_TRIP(quote); break;
	case TB_MD_TRADE_TEMPLATE_ID: ROUND_TRIP(trade); break;
	case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID: book_round_trip(buf, len); break;
	case TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID:
		ROUND_TRIP(instrument_definition);
		break;
	case TB_MD_TRADING_STATUS_TEMPLATE_ID: ROUND_TRIP(trading_status); break;
	case TB_MD_SNAPSHOT_BEGIN_TEMPLATE_ID: ROUND_TRIP(snapshot_begin); break;
	case TB_MD_SNAPSHOT_END_TEMPLATE_ID: ROUND_TRIP(snapshot_end); break;
	case TB_MD_ORDER_TEMPLATE_ID: ROUND_TRIP(order); break;
	case TB_MD_ORDER_ACK_TEMPLATE_ID: ROUND_TRIP(order_ack); break;
	}
}

/* Every template of the schema is one decode_as knows. */
static void check_coverage(void)
{
	static int done;

	if (done)
		return;
	done = 1;
	for (unsigned t = 0; t <= UINT16_MAX; t++) {
		if (tb_md_template_name((uint16_t)t) &&
		    (t < 1 || t > TEMPLATES)) {
			fprintf(stderr, "fuzz_schema: template %u (%s) has no "
				"round trip in tests/fuzz/fuzz_schema.c\n", t,
				tb_md_template_name((uint16_t)t));
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = fuzz_copy(data, size);

	check_coverage();
	check_print(buf, size, 0);
	check_print(buf, size, 1);
	if (size >= TB_MD_HEADER_LEN) {
		for (uint16_t t = 1; t <= TEMPLATES; t++) {
			memcpy(buf + 2, &t, sizeof(t)); /* template_id */
			decode_as(t, buf, size);
		}
	} else {
		decode_as(TB_MD_QUOTE_TEMPLATE_ID, buf, size);
	}
	free(buf);
	return 0;
}
