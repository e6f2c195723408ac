/*
 * gw.h - the order-gateway sink's wire format (UDP, one message per
 * datagram), until the schema's Order/OrderAck replace it.
 *
 * A strategy sends an order datagram to tb-gateway; the gateway stamps its
 * arrival with tb_clock_now_ns() and answers, to the sender's address, an
 * ack that carries that arrival time and echoes the order id and the
 * sender's own send time, so the strategy can split order-sent -> gateway
 * and gateway -> ack.  A malformed datagram gets no answer; the gateway
 * counts it by kind.
 *
 * All fields little-endian (the host order on every platform tickbus runs
 * on; both ends are on one host or one LAN), fixed width, explicit padding
 * that must be zero.  Prices are int64 mantissas with exponent -4, as in
 * the feed.
 *
 *   order (48 bytes)                  ack (40 bytes)
 *    0  u32 magic  TB_GW_MAGIC         0  u32 magic
 *    4  u16 version TB_GW_VERSION      4  u16 version
 *    6  u16 type   TB_GW_ORDER         6  u16 type   TB_GW_ACK
 *    8  u64 order_id                   8  u64 order_id   (echoed)
 *   16  u64 sent_ns (sender's clock)  16  u64 sent_ns    (echoed)
 *   24  i64 price                     24  u64 arrival_ns (gateway clock)
 *   32  u32 qty (> 0)                 32  u32 status     (0 = accepted)
 *   36  u32 instrument                36  u32 pad (0)
 *   40  u8  side 'B' or 'S'
 *   41  u8  pad[7] (0)
 */
#ifndef TB_GW_H
#define TB_GW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TB_GW_MAGIC 0x57475442u /* bytes 'B','T','G','W' */
#define TB_GW_VERSION 1u
#define TB_GW_ORDER 1u
#define TB_GW_ACK 2u

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gw.h: the wire format is little-endian; add byte swaps"
#endif

typedef struct tb_gw_order {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t order_id;
	uint64_t sent_ns;
	int64_t price;
	uint32_t qty;
	uint32_t instrument;
	uint8_t side;
	uint8_t pad[7];
} tb_gw_order_t;

typedef struct tb_gw_ack {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t order_id;
	uint64_t sent_ns;
	uint64_t arrival_ns;
	uint32_t status;
	uint32_t pad;
} tb_gw_ack_t;

_Static_assert(sizeof(tb_gw_order_t) == 48, "order size");
_Static_assert(offsetof(tb_gw_order_t, version) == 4, "order.version");
_Static_assert(offsetof(tb_gw_order_t, type) == 6, "order.type");
_Static_assert(offsetof(tb_gw_order_t, order_id) == 8, "order.order_id");
_Static_assert(offsetof(tb_gw_order_t, sent_ns) == 16, "order.sent_ns");
_Static_assert(offsetof(tb_gw_order_t, price) == 24, "order.price");
_Static_assert(offsetof(tb_gw_order_t, qty) == 32, "order.qty");
_Static_assert(offsetof(tb_gw_order_t, instrument) == 36, "order.instrument");
_Static_assert(offsetof(tb_gw_order_t, side) == 40, "order.side");
_Static_assert(offsetof(tb_gw_order_t, pad) == 41, "order.pad");
_Static_assert(sizeof(tb_gw_ack_t) == 40, "ack size");
_Static_assert(offsetof(tb_gw_ack_t, order_id) == 8, "ack.order_id");
_Static_assert(offsetof(tb_gw_ack_t, sent_ns) == 16, "ack.sent_ns");
_Static_assert(offsetof(tb_gw_ack_t, arrival_ns) == 24, "ack.arrival_ns");
_Static_assert(offsetof(tb_gw_ack_t, status) == 32, "ack.status");
_Static_assert(offsetof(tb_gw_ack_t, pad) == 36, "ack.pad");

/* Why a datagram was refused (negative, in the order they are checked). */
enum tb_gw_error {
	TB_GW_ESIZE = -1,    /* not exactly the message's size */
	TB_GW_EMAGIC = -2,
	TB_GW_EVERSION = -3,
	TB_GW_ETYPE = -4,
	TB_GW_EFIELD = -5,   /* qty 0, side not B/S, or non-zero padding */
};
#define TB_GW_NERR 5

static inline void tb_gw_order_init(tb_gw_order_t *o)
{
	memset(o, 0, sizeof(*o));
	o->magic = TB_GW_MAGIC;
	o->version = TB_GW_VERSION;
	o->type = TB_GW_ORDER;
}

/* Checks an order datagram of `len` bytes and copies it to `out`.
 * Returns 0 or a TB_GW_E* code. */
static inline int tb_gw_order_check(const void *buf, size_t len,
				    tb_gw_order_t *out)
{
	static const uint8_t zero[7];

	if (len != sizeof(*out))
		return TB_GW_ESIZE;
	memcpy(out, buf, sizeof(*out));
	if (out->magic != TB_GW_MAGIC)
		return TB_GW_EMAGIC;
	if (out->version != TB_GW_VERSION)
		return TB_GW_EVERSION;
	if (out->type != TB_GW_ORDER)
		return TB_GW_ETYPE;
	if (out->qty == 0 || (out->side != 'B' && out->side != 'S') ||
	    memcmp(out->pad, zero, sizeof(zero)) != 0)
		return TB_GW_EFIELD;
	return 0;
}

/* Checks an ack datagram; returns 0 or a TB_GW_E* code. */
static inline int tb_gw_ack_check(const void *buf, size_t len, tb_gw_ack_t *out)
{
	if (len != sizeof(*out))
		return TB_GW_ESIZE;
	memcpy(out, buf, sizeof(*out));
	if (out->magic != TB_GW_MAGIC)
		return TB_GW_EMAGIC;
	if (out->version != TB_GW_VERSION)
		return TB_GW_EVERSION;
	if (out->type != TB_GW_ACK)
		return TB_GW_ETYPE;
	if (out->pad != 0)
		return TB_GW_EFIELD;
	return 0;
}

static inline const char *tb_gw_strerror(int code)
{
	switch (code) {
	case 0: return "ok";
	case TB_GW_ESIZE: return "wrong datagram size";
	case TB_GW_EMAGIC: return "bad magic";
	case TB_GW_EVERSION: return "unsupported version";
	case TB_GW_ETYPE: return "wrong message type";
	case TB_GW_EFIELD: return "field out of range or padding not zero";
	default: return "unknown gateway error";
	}
}

#endif
