/*
 * mold.c - the MoldUDP64 codec (format in mold.h).  Hot path throughout:
 * no allocation, lock or system call.
 */
#include "tools/md/mold.h"

#include <string.h>

int tb_mold_parse(const void *buf, size_t len, tb_mold_pkt_t *p)
{
	const uint8_t *b = buf;
	size_t off = 0, i;

	if (len < TB_MOLD_HDR_LEN)
		return TB_MOLD_ESHORT;
	memcpy(p->session, b, TB_MOLD_SESSION_LEN);
	p->seq = tb_be_get64(b + 10);
	p->count = tb_be_get16(b + 18);
	p->blocks = b + TB_MOLD_HDR_LEN;
	p->blocks_len = len - TB_MOLD_HDR_LEN;
	if (p->seq == 0)
		return TB_MOLD_ESEQ;
	if (p->count == TB_MOLD_COUNT_HEARTBEAT ||
	    p->count == TB_MOLD_COUNT_END)
		return p->blocks_len ? TB_MOLD_ECTLLEN : 0;
	if (p->seq > UINT64_MAX - p->count)
		return TB_MOLD_ESEQ;
	for (i = 0; i < p->count; i++) {
		size_t n;

		if (off + 2 > p->blocks_len)
			return TB_MOLD_EBLOCK;
		n = tb_be_get16(p->blocks + off);
		if (off + 2 + n > p->blocks_len)
			return TB_MOLD_EBLOCK;
		off += 2 + n;
	}
	return off == p->blocks_len ? 0 : TB_MOLD_ECOUNT;
}

int tb_mold_build_begin(tb_mold_builder_t *b, void *buf, size_t cap,
			const char *session, uint64_t seq)
{
	if (cap < TB_MOLD_HDR_LEN)
		return TB_MOLD_ENOSPACE;
	b->buf = buf;
	b->cap = cap;
	b->len = TB_MOLD_HDR_LEN;
	b->count = 0;
	memcpy(b->buf, session, TB_MOLD_SESSION_LEN);
	tb_be_put64(b->buf + 10, seq);
	tb_be_put16(b->buf + 18, 0);
	return 0;
}

int tb_mold_build_add(tb_mold_builder_t *b, const void *msg, size_t len)
{
	if (len > 0xFFFF || b->len + 2 + len > b->cap ||
	    b->count >= TB_MOLD_COUNT_END - 1)
		return TB_MOLD_ENOSPACE;
	tb_be_put16(b->buf + b->len, (uint16_t)len);
	memcpy(b->buf + b->len + 2, msg, len);
	b->len += 2 + len;
	b->count++;
	return 0;
}

size_t tb_mold_build_end(tb_mold_builder_t *b)
{
	tb_be_put16(b->buf + 18, b->count);
	return b->len;
}

size_t tb_mold_write_ctl(void *buf, const char *session, uint64_t next_seq,
			 uint16_t count)
{
	uint8_t *b = buf;

	memcpy(b, session, TB_MOLD_SESSION_LEN);
	tb_be_put64(b + 10, next_seq);
	tb_be_put16(b + 18, count);
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
		return TB_MOLD_EREQLEN;
	memcpy(r->session, b, TB_MOLD_SESSION_LEN);
	r->seq = tb_be_get64(b + 10);
	r->count = tb_be_get16(b + 18);
	if (r->count == 0 || r->count == TB_MOLD_COUNT_END)
		return TB_MOLD_EREQCOUNT;
	if (r->seq == 0 || r->seq > UINT64_MAX - r->count)
		return TB_MOLD_ESEQ;
	return 0;
}

const char *tb_mold_strerror(int code)
{
	switch (code) {
	case 0: return "ok";
	case TB_MOLD_ESHORT: return "packet shorter than the MoldUDP64 header";
	case TB_MOLD_EBLOCK: return "message block runs past the packet";
	case TB_MOLD_ECOUNT: return "bytes left over after the counted blocks";
	case TB_MOLD_ECTLLEN: return "heartbeat or end of session carries data";
	case TB_MOLD_ESEQ: return "sequence 0 or sequence overflow";
	case TB_MOLD_EREQLEN: return "re-request is not 20 bytes";
	case TB_MOLD_EREQCOUNT: return "re-request for 0 or 0xFFFF messages";
	case TB_MOLD_ENOSPACE: return "buffer too small";
	default: return "unknown mold error";
	}
}
