/*
 * itch.c - MoldUDP64 and ITCH 5.0-style codecs (formats in itch.h).
 *
 * Each ITCH type has one fixed length, so a decoder checks the length once
 * against the table and then reads fixed offsets.  Hot path throughout: no
 * allocation, lock or system call.
 */
#include "tools/md/itch.h"

#include <string.h>

/* ------------------------------------------------------- byte helpers */

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
	       ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t get48(const uint8_t *p)
{
	return ((uint64_t)get16(p) << 32) | get32(p + 2);
}

static inline uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void put48(uint8_t *p, uint64_t v)
{
	put16(p, (uint16_t)(v >> 32));
	put32(p + 2, (uint32_t)v);
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

/* ------------------------------------------------------------ MoldUDP64 */

int tb_mold_parse(const void *buf, size_t len, tb_mold_pkt_t *p)
{
	const uint8_t *b = buf;
	size_t off = 0, i;

	if (len < TB_MOLD_HDR_LEN)
		return TB_ITCH_ESHORT;
	memcpy(p->session, b, TB_MOLD_SESSION_LEN);
	p->seq = get64(b + 10);
	p->count = get16(b + 18);
	p->blocks = b + TB_MOLD_HDR_LEN;
	p->blocks_len = len - TB_MOLD_HDR_LEN;
	if (p->seq == 0)
		return TB_ITCH_ESEQ;
	if (p->count == TB_MOLD_COUNT_HEARTBEAT ||
	    p->count == TB_MOLD_COUNT_END)
		return p->blocks_len ? TB_ITCH_ECTLLEN : 0;
	if (p->seq > UINT64_MAX - p->count)
		return TB_ITCH_ESEQ;
	for (i = 0; i < p->count; i++) {
		size_t n;

		if (off + 2 > p->blocks_len)
			return TB_ITCH_EBLOCK;
		n = get16(p->blocks + off);
		if (off + 2 + n > p->blocks_len)
			return TB_ITCH_EBLOCK;
		off += 2 + n;
	}
	return off == p->blocks_len ? 0 : TB_ITCH_ECOUNT;
}

int tb_mold_build_begin(tb_mold_builder_t *b, void *buf, size_t cap,
			const char *session, uint64_t seq)
{
	if (cap < TB_MOLD_HDR_LEN)
		return TB_ITCH_ENOSPACE;
	b->buf = buf;
	b->cap = cap;
	b->len = TB_MOLD_HDR_LEN;
	b->count = 0;
	memcpy(b->buf, session, TB_MOLD_SESSION_LEN);
	put64(b->buf + 10, seq);
	put16(b->buf + 18, 0);
	return 0;
}

int tb_mold_build_add(tb_mold_builder_t *b, const void *msg, size_t len)
{
	if (len > 0xFFFF || b->len + 2 + len > b->cap ||
	    b->count >= TB_MOLD_COUNT_END - 1)
		return TB_ITCH_ENOSPACE;
	put16(b->buf + b->len, (uint16_t)len);
	memcpy(b->buf + b->len + 2, msg, len);
	b->len += 2 + len;
	b->count++;
	return 0;
}

size_t tb_mold_build_end(tb_mold_builder_t *b)
{
	put16(b->buf + 18, b->count);
	return b->len;
}

size_t tb_mold_write_ctl(void *buf, const char *session, uint64_t next_seq,
			 uint16_t count)
{
	uint8_t *b = buf;

	memcpy(b, session, TB_MOLD_SESSION_LEN);
	put64(b + 10, next_seq);
	put16(b + 18, count);
	return TB_MOLD_HDR_LEN;
}

size_t tb_mold_req_encode(void *buf, const char *session, uint64_t seq,
			  uint16_t count)
{
	return tb_mold_write_ctl(buf, session, seq, count);
}

int tb_mold_req_decode(const void *buf, size_t len, tb_mold_req_t *r)
{
	const uint8_t *b = buf;

	if (len != TB_MOLD_REQ_LEN)
		return TB_ITCH_EREQLEN;
	memcpy(r->session, b, TB_MOLD_SESSION_LEN);
	r->seq = get64(b + 10);
	r->count = get16(b + 18);
	if (r->count == 0 || r->count == TB_MOLD_COUNT_END)
		return TB_ITCH_EREQCOUNT;
	if (r->seq == 0 || r->seq > UINT64_MAX - r->count)
		return TB_ITCH_ESEQ;
	return 0;
}

/* ----------------------------------------------------------------- ITCH */

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
	m->locate = get16(b + 1);
	m->tracking = get16(b + 3);
	m->timestamp = get48(b + 5);
	switch (m->type) {
	case TB_ITCH_SYSTEM_EVENT:
		m->u.sys.code = b[HDR];
		break;
	case TB_ITCH_STOCK_DIRECTORY:
		memcpy(m->u.dir.stock, b + 11, 8);
		m->u.dir.market_category = b[19];
		m->u.dir.financial_status = b[20];
		m->u.dir.round_lot = get32(b + 21);
		m->u.dir.round_lots_only = b[25];
		m->u.dir.issue_class = b[26];
		memcpy(m->u.dir.issue_subtype, b + 27, 2);
		m->u.dir.authenticity = b[29];
		m->u.dir.short_sale_threshold = b[30];
		m->u.dir.ipo_flag = b[31];
		m->u.dir.luld_tier = b[32];
		m->u.dir.etp_flag = b[33];
		m->u.dir.etp_leverage = get32(b + 34);
		m->u.dir.inverse = b[38];
		break;
	case TB_ITCH_ADD_ORDER:
	case TB_ITCH_ADD_ORDER_MPID:
		m->u.add.ref = get64(b + 11);
		m->u.add.side = b[19];
		m->u.add.shares = get32(b + 20);
		memcpy(m->u.add.stock, b + 24, 8);
		m->u.add.price = get32(b + 32);
		if (m->type == TB_ITCH_ADD_ORDER_MPID)
			memcpy(m->u.add.mpid, b + 36, 4);
		else
			memset(m->u.add.mpid, ' ', 4);
		if (!side_ok(m->u.add.side))
			return TB_ITCH_EFIELD;
		break;
	case TB_ITCH_ORDER_EXECUTED:
	case TB_ITCH_ORDER_EXECUTED_PRICE:
		m->u.exec.ref = get64(b + 11);
		m->u.exec.shares = get32(b + 19);
		m->u.exec.match = get64(b + 23);
		if (m->type == TB_ITCH_ORDER_EXECUTED_PRICE) {
			m->u.exec.printable = b[31];
			m->u.exec.price = get32(b + 32);
			if (b[31] != 'Y' && b[31] != 'N')
				return TB_ITCH_EFIELD;
		} else {
			m->u.exec.printable = 'Y';
			m->u.exec.price = 0;
		}
		break;
	case TB_ITCH_ORDER_CANCEL:
		m->u.cancel.ref = get64(b + 11);
		m->u.cancel.shares = get32(b + 19);
		break;
	case TB_ITCH_ORDER_DELETE:
		m->u.del.ref = get64(b + 11);
		break;
	case TB_ITCH_ORDER_REPLACE:
		m->u.replace.orig_ref = get64(b + 11);
		m->u.replace.new_ref = get64(b + 19);
		m->u.replace.shares = get32(b + 27);
		m->u.replace.price = get32(b + 31);
		break;
	case TB_ITCH_TRADE:
		m->u.trade.ref = get64(b + 11);
		m->u.trade.side = b[19];
		m->u.trade.shares = get32(b + 20);
		memcpy(m->u.trade.stock, b + 24, 8);
		m->u.trade.price = get32(b + 32);
		m->u.trade.match = get64(b + 36);
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
	put16(b + 1, m->locate);
	put16(b + 3, m->tracking);
	put48(b + 5, m->timestamp);
	switch (m->type) {
	case TB_ITCH_SYSTEM_EVENT:
		b[HDR] = m->u.sys.code;
		break;
	case TB_ITCH_STOCK_DIRECTORY:
		memcpy(b + 11, m->u.dir.stock, 8);
		b[19] = m->u.dir.market_category;
		b[20] = m->u.dir.financial_status;
		put32(b + 21, m->u.dir.round_lot);
		b[25] = m->u.dir.round_lots_only;
		b[26] = m->u.dir.issue_class;
		memcpy(b + 27, m->u.dir.issue_subtype, 2);
		b[29] = m->u.dir.authenticity;
		b[30] = m->u.dir.short_sale_threshold;
		b[31] = m->u.dir.ipo_flag;
		b[32] = m->u.dir.luld_tier;
		b[33] = m->u.dir.etp_flag;
		put32(b + 34, m->u.dir.etp_leverage);
		b[38] = m->u.dir.inverse;
		break;
	case TB_ITCH_ADD_ORDER:
	case TB_ITCH_ADD_ORDER_MPID:
		put64(b + 11, m->u.add.ref);
		b[19] = m->u.add.side;
		put32(b + 20, m->u.add.shares);
		memcpy(b + 24, m->u.add.stock, 8);
		put32(b + 32, m->u.add.price);
		if (m->type == TB_ITCH_ADD_ORDER_MPID)
			memcpy(b + 36, m->u.add.mpid, 4);
		break;
	case TB_ITCH_ORDER_EXECUTED:
	case TB_ITCH_ORDER_EXECUTED_PRICE:
		put64(b + 11, m->u.exec.ref);
		put32(b + 19, m->u.exec.shares);
		put64(b + 23, m->u.exec.match);
		if (m->type == TB_ITCH_ORDER_EXECUTED_PRICE) {
			b[31] = m->u.exec.printable;
			put32(b + 32, m->u.exec.price);
		}
		break;
	case TB_ITCH_ORDER_CANCEL:
		put64(b + 11, m->u.cancel.ref);
		put32(b + 19, m->u.cancel.shares);
		break;
	case TB_ITCH_ORDER_DELETE:
		put64(b + 11, m->u.del.ref);
		break;
	case TB_ITCH_ORDER_REPLACE:
		put64(b + 11, m->u.replace.orig_ref);
		put64(b + 19, m->u.replace.new_ref);
		put32(b + 27, m->u.replace.shares);
		put32(b + 31, m->u.replace.price);
		break;
	case TB_ITCH_TRADE:
		put64(b + 11, m->u.trade.ref);
		b[19] = m->u.trade.side;
		put32(b + 20, m->u.trade.shares);
		memcpy(b + 24, m->u.trade.stock, 8);
		put32(b + 32, m->u.trade.price);
		put64(b + 36, m->u.trade.match);
		break;
	}
	return (int)n;
}

const char *tb_itch_strerror(int code)
{
	switch (code) {
	case 0: return "ok";
	case TB_ITCH_ESHORT: return "packet shorter than the MoldUDP64 header";
	case TB_ITCH_EBLOCK: return "message block runs past the packet";
	case TB_ITCH_ECOUNT: return "bytes left over after the counted blocks";
	case TB_ITCH_ECTLLEN: return "heartbeat or end of session carries data";
	case TB_ITCH_ESEQ: return "sequence 0 or sequence overflow";
	case TB_ITCH_EREQLEN: return "re-request is not 20 bytes";
	case TB_ITCH_EREQCOUNT: return "re-request for 0 or 0xFFFF messages";
	case TB_ITCH_EEMPTY: return "zero-length message";
	case TB_ITCH_ETYPE: return "unknown message type";
	case TB_ITCH_EMSGLEN: return "message length does not match its type";
	case TB_ITCH_EFIELD: return "field value out of range";
	case TB_ITCH_ENOSPACE: return "buffer too small";
	default: return "unknown itch error";
	}
}
