/*
 * itch.c - the ITCH 5.0-style message codec (formats in itch.h).
 *
 * Each ITCH type has one fixed length, so a decoder checks the length once
 * against the table and then reads fixed offsets.  Hot path throughout: no
 * allocation, lock or system call.
 */
#include "tools/md/itch.h"

#include "tools/md/be.h"

#include <string.h>

/* Offset of the first type-specific field: type 1 + locate 2 + tracking 2
 * + timestamp 6. */
#define HDR 11

size_t tb_itch_msg_len(uint8_t type)
{
	switch (type) {
	case TB_ITCH_SYSTEM_EVENT: return 12;
	case TB_ITCH_STOCK_DIRECTORY: return 39;
	case TB_ITCH_ADD_ORDER: return 36;
	case TB_ITCH_ADD_ORDER_MPID: return 40;
	case TB_ITCH_ORDER_EXECUTED: return 31;
	case TB_ITCH_ORDER_EXECUTED_PRICE: return 36;
	case TB_ITCH_ORDER_CANCEL: return 23;
	case TB_ITCH_ORDER_DELETE: return 19;
	case TB_ITCH_ORDER_REPLACE: return 35;
	case TB_ITCH_TRADE: return 44;
	default: return 0;
	}
}

static inline int side_ok(uint8_t s)
{
	return s == 'B' || s == 'S';
}

int tb_itch_decode(const void *buf, size_t len, tb_itch_msg_t *m)
{
	const uint8_t *b = buf;
	size_t want;

	if (len == 0)
		return TB_ITCH_EEMPTY;
	want = tb_itch_msg_len(b[0]);
	if (want == 0)
		return TB_ITCH_ETYPE;
	if (len != want)
		return TB_ITCH_EMSGLEN;
	m->type = b[0];
	m->locate = tb_be_get16(b + 1);
	m->tracking = tb_be_get16(b + 3);
	m->timestamp = tb_be_get48(b + 5);
	switch (m->type) {
	case TB_ITCH_SYSTEM_EVENT:
		m->u.sys.code = b[HDR];
		break;
	case TB_ITCH_STOCK_DIRECTORY:
		memcpy(m->u.dir.stock, b + 11, 8);
		m->u.dir.market_category = b[19];
		m->u.dir.financial_status = b[20];
		m->u.dir.round_lot = tb_be_get32(b + 21);
		m->u.dir.round_lots_only = b[25];
		m->u.dir.issue_class = b[26];
		memcpy(m->u.dir.issue_subtype, b + 27, 2);
		m->u.dir.authenticity = b[29];
		m->u.dir.short_sale_threshold = b[30];
		m->u.dir.ipo_flag = b[31];
		m->u.dir.luld_tier = b[32];
		m->u.dir.etp_flag = b[33];
		m->u.dir.etp_leverage = tb_be_get32(b + 34);
		m->u.dir.inverse = b[38];
		break;
	case TB_ITCH_ADD_ORDER:
	case TB_ITCH_ADD_ORDER_MPID:
		m->u.add.ref = tb_be_get64(b + 11);
		m->u.add.side = b[19];
		m->u.add.shares = tb_be_get32(b + 20);
		memcpy(m->u.add.stock, b + 24, 8);
		m->u.add.price = tb_be_get32(b + 32);
		if (m->type == TB_ITCH_ADD_ORDER_MPID)
			memcpy(m->u.add.mpid, b + 36, 4);
		else
			memset(m->u.add.mpid, ' ', 4);
		if (!side_ok(m->u.add.side))
			return TB_ITCH_EFIELD;
		break;
	case TB_ITCH_ORDER_EXECUTED:
	case TB_ITCH_ORDER_EXECUTED_PRICE:
		m->u.exec.ref = tb_be_get64(b + 11);
		m->u.exec.shares = tb_be_get32(b + 19);
		m->u.exec.match = tb_be_get64(b + 23);
		if (m->type == TB_ITCH_ORDER_EXECUTED_PRICE) {
			m->u.exec.printable = b[31];
			m->u.exec.price = tb_be_get32(b + 32);
			if (b[31] != 'Y' && b[31] != 'N')
				return TB_ITCH_EFIELD;
		} else {
			m->u.exec.printable = 'Y';
			m->u.exec.price = 0;
		}
		break;
	case TB_ITCH_ORDER_CANCEL:
		m->u.cancel.ref = tb_be_get64(b + 11);
		m->u.cancel.shares = tb_be_get32(b + 19);
		break;
	case TB_ITCH_ORDER_DELETE:
		m->u.del.ref = tb_be_get64(b + 11);
		break;
	case TB_ITCH_ORDER_REPLACE:
		m->u.replace.orig_ref = tb_be_get64(b + 11);
		m->u.replace.new_ref = tb_be_get64(b + 19);
		m->u.replace.shares = tb_be_get32(b + 27);
		m->u.replace.price = tb_be_get32(b + 31);
		break;
	case TB_ITCH_TRADE:
		m->u.trade.ref = tb_be_get64(b + 11);
		m->u.trade.side = b[19];
		m->u.trade.shares = tb_be_get32(b + 20);
		memcpy(m->u.trade.stock, b + 24, 8);
		m->u.trade.price = tb_be_get32(b + 32);
		m->u.trade.match = tb_be_get64(b + 36);
		if (!side_ok(m->u.trade.side))
			return TB_ITCH_EFIELD;
		break;
	}
	return 0;
}

int tb_itch_encode(const tb_itch_msg_t *m, void *buf, size_t cap)
{
	uint8_t *b = buf;
	size_t n = tb_itch_msg_len(m->type);

	if (n == 0)
		return TB_ITCH_ETYPE;
	if (cap < n)
		return TB_ITCH_ENOSPACE;
	b[0] = m->type;
	tb_be_put16(b + 1, m->locate);
	tb_be_put16(b + 3, m->tracking);
	tb_be_put48(b + 5, m->timestamp);
	switch (m->type) {
	case TB_ITCH_SYSTEM_EVENT:
		b[HDR] = m->u.sys.code;
		break;
	case TB_ITCH_STOCK_DIRECTORY:
		memcpy(b + 11, m->u.dir.stock, 8);
		b[19] = m->u.dir.market_category;
		b[20] = m->u.dir.financial_status;
		tb_be_put32(b + 21, m->u.dir.round_lot);
		b[25] = m->u.dir.round_lots_only;
		b[26] = m->u.dir.issue_class;
		memcpy(b + 27, m->u.dir.issue_subtype, 2);
		b[29] = m->u.dir.authenticity;
		b[30] = m->u.dir.short_sale_threshold;
		b[31] = m->u.dir.ipo_flag;
		b[32] = m->u.dir.luld_tier;
		b[33] = m->u.dir.etp_flag;
		tb_be_put32(b + 34, m->u.dir.etp_leverage);
		b[38] = m->u.dir.inverse;
		break;
	case TB_ITCH_ADD_ORDER:
	case TB_ITCH_ADD_ORDER_MPID:
		tb_be_put64(b + 11, m->u.add.ref);
		b[19] = m->u.add.side;
		tb_be_put32(b + 20, m->u.add.shares);
		memcpy(b + 24, m->u.add.stock, 8);
		tb_be_put32(b + 32, m->u.add.price);
		if (m->type == TB_ITCH_ADD_ORDER_MPID)
			memcpy(b + 36, m->u.add.mpid, 4);
		break;
	case TB_ITCH_ORDER_EXECUTED:
	case TB_ITCH_ORDER_EXECUTED_PRICE:
		tb_be_put64(b + 11, m->u.exec.ref);
		tb_be_put32(b + 19, m->u.exec.shares);
		tb_be_put64(b + 23, m->u.exec.match);
		if (m->type == TB_ITCH_ORDER_EXECUTED_PRICE) {
			b[31] = m->u.exec.printable;
			tb_be_put32(b + 32, m->u.exec.price);
		}
		break;
	case TB_ITCH_ORDER_CANCEL:
		tb_be_put64(b + 11, m->u.cancel.ref);
		tb_be_put32(b + 19, m->u.cancel.shares);
		break;
	case TB_ITCH_ORDER_DELETE:
		tb_be_put64(b + 11, m->u.del.ref);
		break;
	case TB_ITCH_ORDER_REPLACE:
		tb_be_put64(b + 11, m->u.replace.orig_ref);
		tb_be_put64(b + 19, m->u.replace.new_ref);
		tb_be_put32(b + 27, m->u.replace.shares);
		tb_be_put32(b + 31, m->u.replace.price);
		break;
	case TB_ITCH_TRADE:
		tb_be_put64(b + 11, m->u.trade.ref);
		b[19] = m->u.trade.side;
		tb_be_put32(b + 20, m->u.trade.shares);
		memcpy(b + 24, m->u.trade.stock, 8);
		tb_be_put32(b + 32, m->u.trade.price);
		tb_be_put64(b + 36, m->u.trade.match);
		break;
	}
	return (int)n;
}

const char *tb_itch_strerror(int code)
{
	switch (code) {
	case 0: return "ok";
	case TB_ITCH_EEMPTY: return "zero-length message";
	case TB_ITCH_ETYPE: return "unknown message type";
	case TB_ITCH_EMSGLEN: return "message length does not match its type";
	case TB_ITCH_EFIELD: return "field value out of range";
	case TB_ITCH_ENOSPACE: return "buffer too small";
	default: return "unknown itch error";
	}
}
