/*
 * fuzz_gw.c - libFuzzer target for the order gateway's wire format
 * (tools/md/gw.h): the input is one datagram, read as an order (what
 * tb-gateway receives) and as an ack (what a strategy receives).
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - a check returns 0 or one of the TB_GW_E* codes, each with a name;
 *   - a datagram that checks is exactly one message long, its fields are in
 *     range (quantity > 0, side 'B' or 'S', zero padding), and the message
 *     built again from those fields by the sender's own calls
 *     (tb_gw_order_init and assignments) is the same bytes;
 *   - a refusal says the first thing wrong, in the documented order: size,
 *     magic, version, type, fields.
 */
#include "tools/md/gw.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first fault the documented order finds in `size` bytes holding a
 * message of `want` bytes, from its header alone (0: the header is fine). */
static int header_fault(const uint8_t *data, size_t size, size_t want,
			uint16_t type)
{
	uint32_t magic;
	uint16_t version, t;

	if (size != want)
		return TB_GW_ESIZE;
	memcpy(&magic, data, 4);
	memcpy(&version, data + 4, 2);
	memcpy(&t, data + 6, 2);
	if (magic != TB_GW_MAGIC)
		return TB_GW_EMAGIC;
	if (version != TB_GW_VERSION)
		return TB_GW_EVERSION;
	if (t != type)
		return TB_GW_ETYPE;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_gw_order_t o, again;
	tb_gw_ack_t a, ack_again;
	int rc, hf;

	rc = tb_gw_order_check(data, size, &o);
	hf = header_fault(data, size, sizeof(o), TB_GW_ORDER);
	if (rc > 0 || rc < -TB_GW_NERR || !tb_gw_strerror(rc) ||
	    (hf && rc != hf) || (!hf && rc != 0 && rc != TB_GW_EFIELD))
		abort();
	if (rc == 0) {
		if (o.qty == 0 || (o.side != 'B' && o.side != 'S'))
			abort();
		tb_gw_order_init(&again);
		again.order_id = o.order_id;
		again.sent_ns = o.sent_ns;
		again.price = o.price;
		again.qty = o.qty;
		again.instrument = o.instrument;
		again.side = o.side;
		if (memcmp(&again, data, sizeof(again)) != 0)
			abort();
	}

	rc = tb_gw_ack_check(data, size, &a);
	hf = header_fault(data, size, sizeof(a), TB_GW_ACK);
	if (rc > 0 || rc < -TB_GW_NERR || !tb_gw_strerror(rc) ||
	    (hf && rc != hf) || (!hf && rc != 0 && rc != TB_GW_EFIELD))
		abort();
	if (rc == 0) {
		memset(&ack_again, 0, sizeof(ack_again));
		ack_again.magic = TB_GW_MAGIC;
		ack_again.version = TB_GW_VERSION;
		ack_again.type = TB_GW_ACK;
		ack_again.order_id = a.order_id;
		ack_again.sent_ns = a.sent_ns;
		ack_again.arrival_ns = a.arrival_ns;
		ack_again.status = a.status;
		if (memcmp(&ack_again, data, sizeof(ack_again)) != 0)
			abort();
	}
	return 0;
}
