/*
 * itch.h - the exchange feed's wire formats: MoldUDP64 packets and the
 * ITCH 5.0-style order-by-order messages they carry.
 *
 * MoldUDP64 (all integers big-endian):
 *
 *   downstream packet   session[10]  seq u64  count u16  then `count`
 *                       message blocks, each  length u16  bytes[length]
 *     seq is the sequence number of the first message; the i-th block
 *     carries seq + i.  count 0 is a heartbeat and count 0xFFFF the end of
 *     session, both with no blocks and with seq = the next sequence the
 *     sender will use (so a lost tail is seen as a gap).
 *   re-request packet   session[10]  seq u64  count u16  (exactly 20 bytes)
 *     asks the retransmission server for messages seq .. seq+count-1; the
 *     answer is an ordinary downstream packet sent back to the requester.
 *
 * ITCH messages (big-endian, fixed length per type; every message starts
 * with type u8, stock locate u16, tracking number u16, timestamp u48 in ns
 * since midnight).  The types this project uses and their total lengths:
 *
 *   'S' system event 12     'R' stock directory 39
 *   'A' add order 36        'F' add order with attribution 40
 *   'E' order executed 31   'C' order executed with price 36
 *   'X' order cancel 23     'D' order delete 19
 *   'U' order replace 35    'P' trade (non-cross) 44
 *
 * Prices are u32 with four implied decimals.  Stock symbols are 8 bytes,
 * space padded.  The layouts follow the public Nasdaq TotalView-ITCH 5.0 and
 * MoldUDP64 specifications.
 *
 * Errors: every decoder checks each length before it reads, and returns 0
 * or one of the negative TB_ITCH_E* codes below, which name the first thing
 * wrong so that a receiver can count malformed input by kind.  These codes
 * are their own range (below -100) and never collide with tb_result codes;
 * tb_itch_strerror() names them.  Nothing here allocates, locks, sets errno
 * or makes a system call: all of it may run on a hot path, on any thread.
 */
#ifndef TB_ITCH_H
#define TB_ITCH_H

#include <stddef.h>
#include <stdint.h>

#define TB_MOLD_SESSION_LEN 10
#define TB_MOLD_HDR_LEN 20
#define TB_MOLD_REQ_LEN 20
#define TB_MOLD_COUNT_HEARTBEAT 0u
#define TB_MOLD_COUNT_END 0xFFFFu
/* Largest downstream packet built here: a 1500-byte Ethernet MTU less the
 * IPv4 (20) and UDP (8) headers, so a packet never fragments. */
#define TB_MOLD_MAX_PKT 1472u

enum tb_itch_error {
	TB_ITCH_ESHORT = -101,    /* shorter than the MoldUDP64 header */
	TB_ITCH_EBLOCK = -102,    /* a message block runs past the packet */
	TB_ITCH_ECOUNT = -103,    /* bytes left over after `count` blocks */
	TB_ITCH_ECTLLEN = -104,   /* heartbeat or end of session with data */
	TB_ITCH_ESEQ = -105,      /* sequence 0, or seq + count overflows */
	TB_ITCH_EREQLEN = -106,   /* re-request not exactly 20 bytes */
	TB_ITCH_EREQCOUNT = -107, /* re-request for 0 or 0xFFFF messages */
	TB_ITCH_EEMPTY = -108,    /* zero-length message */
	TB_ITCH_ETYPE = -109,     /* message type not known here */
	TB_ITCH_EMSGLEN = -110,   /* length does not match the type's */
	TB_ITCH_EFIELD = -111,    /* a field holds an impossible value */
	TB_ITCH_ENOSPACE = -112,  /* encode: the buffer is too small */
};

/* ------------------------------------------------------------ MoldUDP64 */

/* A downstream packet after tb_mold_parse(): the header, and the message
 * blocks (already checked to fit exactly). */
typedef struct tb_mold_pkt {
	char session[TB_MOLD_SESSION_LEN];
	uint64_t seq;
	uint16_t count;          /* 0 heartbeat, 0xFFFF end, else messages */
	const uint8_t *blocks;   /* the bytes after the header */
	size_t blocks_len;
} tb_mold_pkt_t;

typedef struct tb_mold_req {
	char session[TB_MOLD_SESSION_LEN];
	uint64_t seq;
	uint16_t count;
} tb_mold_req_t;

/* Checks a downstream packet of `len` bytes whole: header, every block
 * length against what remains, no trailing bytes, no data in a heartbeat or
 * end of session, seq > 0 and seq + count without overflow.  Returns 0 and
 * fills `p`, or a TB_ITCH_E* code (`p` then undefined). */
int tb_mold_parse(const void *buf, size_t len, tb_mold_pkt_t *p);

/* Walks the blocks of a parsed packet: `*off` starts at 0.  Returns 1 and
 * sets the message and its length, or 0 at the end.  Safe on any
 * tb_mold_parse()d packet (the walk re-checks bounds anyway). */
static inline int tb_mold_next(const tb_mold_pkt_t *p, size_t *off,
			       const uint8_t **msg, size_t *len)
{
	size_t n;

	if (*off + 2 > p->blocks_len)
		return 0;
	n = ((size_t)p->blocks[*off] << 8) | p->blocks[*off + 1];
	if (*off + 2 + n > p->blocks_len)
		return 0;
	*msg = p->blocks + *off + 2;
	*len = n;
	*off += 2 + n;
	return 1;
}

/* Builds a downstream packet in a caller's buffer: begin, add messages,
 * end.  The builder never writes past `cap`. */
typedef struct tb_mold_builder {
	uint8_t *buf;
	size_t cap;
	size_t len;
	uint16_t count;
} tb_mold_builder_t;

/* Starts a packet of session/seq in `buf` (cap >= TB_MOLD_HDR_LEN, else
 * TB_ITCH_ENOSPACE).  `session` is 10 bytes, not NUL-terminated. */
int tb_mold_build_begin(tb_mold_builder_t *b, void *buf, size_t cap,
			const char *session, uint64_t seq);

/* Appends one message block; TB_ITCH_ENOSPACE when it does not fit or the
 * packet already holds 0xFFFE messages.  Nothing is written on error. */
int tb_mold_build_add(tb_mold_builder_t *b, const void *msg, size_t len);

/* Writes the final count and returns the packet length. */
size_t tb_mold_build_end(tb_mold_builder_t *b);

/* A heartbeat (count 0) or end of session (count 0xFFFF) packet: writes
 * TB_MOLD_HDR_LEN bytes into `buf` and returns that length. */
size_t tb_mold_write_ctl(void *buf, const char *session, uint64_t next_seq,
			 uint16_t count);

/* Re-request packet: writes exactly TB_MOLD_REQ_LEN bytes. */
size_t tb_mold_req_encode(void *buf, const char *session, uint64_t seq,
			  uint16_t count);

/* Checks a re-request: exactly 20 bytes, seq > 0, 0 < count < 0xFFFF, no
 * overflow.  Returns 0 or a TB_ITCH_E* code. */
int tb_mold_req_decode(const void *buf, size_t len, tb_mold_req_t *r);

/* ----------------------------------------------------------------- ITCH */

enum tb_itch_type {
	TB_ITCH_SYSTEM_EVENT = 'S',
	TB_ITCH_STOCK_DIRECTORY = 'R',
	TB_ITCH_ADD_ORDER = 'A',
	TB_ITCH_ADD_ORDER_MPID = 'F',
	TB_ITCH_ORDER_EXECUTED = 'E',
	TB_ITCH_ORDER_EXECUTED_PRICE = 'C',
	TB_ITCH_ORDER_CANCEL = 'X',
	TB_ITCH_ORDER_DELETE = 'D',
	TB_ITCH_ORDER_REPLACE = 'U',
	TB_ITCH_TRADE = 'P',
};

/* System event codes used by the simulator. */
#define TB_ITCH_EV_START_MESSAGES 'O'
#define TB_ITCH_EV_START_MARKET 'Q'
#define TB_ITCH_EV_END_MARKET 'M'
#define TB_ITCH_EV_END_MESSAGES 'C'

/* One decoded message.  Which union member is valid follows `type`:
 * sys (S), dir (R), add (A, F; mpid only for F), exec (E, C; printable and
 * price only for C), cancel (X), del (D), replace (U), trade (P). */
typedef struct tb_itch_msg {
	uint8_t type;
	uint16_t locate;
	uint16_t tracking;
	uint64_t timestamp; /* 48 bits: ns since midnight */
	union {
		struct {
			uint8_t code;
		} sys;
		struct {
			char stock[8];
			uint8_t market_category;
			uint8_t financial_status;
			uint32_t round_lot;
			uint8_t round_lots_only;
			uint8_t issue_class;
			char issue_subtype[2];
			uint8_t authenticity;
			uint8_t short_sale_threshold;
			uint8_t ipo_flag;
			uint8_t luld_tier;
			uint8_t etp_flag;
			uint32_t etp_leverage;
			uint8_t inverse;
		} dir;
		struct {
			uint64_t ref;
			uint8_t side; /* 'B' or 'S' */
			uint32_t shares;
			char stock[8];
			uint32_t price;
			char mpid[4];
		} add;
		struct {
			uint64_t ref;
			uint32_t shares;
			uint64_t match;
			uint8_t printable; /* 'Y' or 'N' */
			uint32_t price;
		} exec;
		struct {
			uint64_t ref;
			uint32_t shares;
		} cancel;
		struct {
			uint64_t ref;
		} del;
		struct {
			uint64_t orig_ref;
			uint64_t new_ref;
			uint32_t shares;
			uint32_t price;
		} replace;
		struct {
			uint64_t ref;
			uint8_t side;
			uint32_t shares;
			char stock[8];
			uint32_t price;
			uint64_t match;
		} trade;
	} u;
} tb_itch_msg_t;

/* Wire length of a message type, 0 if the type is not known here. */
size_t tb_itch_msg_len(uint8_t type);

/* Decodes one message of `len` bytes.  Returns 0, or TB_ITCH_EEMPTY,
 * TB_ITCH_ETYPE (unknown type: a receiver may skip it), TB_ITCH_EMSGLEN,
 * TB_ITCH_EFIELD (side not B/S, printable not Y/N). */
int tb_itch_decode(const void *buf, size_t len, tb_itch_msg_t *m);

/* Encodes `m` into `buf`; returns the length written, or TB_ITCH_ETYPE /
 * TB_ITCH_ENOSPACE (nothing written). */
int tb_itch_encode(const tb_itch_msg_t *m, void *buf, size_t cap);

/* Name and meaning of a TB_ITCH_E* code; never NULL. */
const char *tb_itch_strerror(int code);

#endif
