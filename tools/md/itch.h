/*
 * itch.h - the ITCH 5.0-style order-by-order messages of the exchange feed.
 *
 * Messages are big-endian and of a fixed length per type; every message
 * starts with type u8, stock locate u16, tracking number u16, timestamp u48
 * in ns since midnight.  The types this project uses and their total
 * lengths:
 *
 *   'S' system event 12     'R' stock directory 39
 *   'A' add order 36        'F' add order with attribution 40
 *   'E' order executed 31   'C' order executed with price 36
 *   'X' order cancel 23     'D' order delete 19
 *   'U' order replace 35    'P' trade (non-cross) 44
 *
 * Prices are u32 with four implied decimals.  Stock symbols are 8 bytes,
 * space padded.  The layouts follow the public Nasdaq TotalView-ITCH 5.0
 * specification.  The messages travel as the blocks of MoldUDP64 packets
 * (mold.h), which this header includes, so that one include gives a feed's
 * sender or receiver both layers.
 *
 * Errors: every decoder checks each length before it reads, and returns 0
 * or one of the negative TB_ITCH_E* codes below, which name the first thing
 * wrong so that a receiver can count malformed messages by kind.  They are
 * their own range (-111..-115, md_error.h) and never collide with tb_result
 * codes; tb_itch_strerror() names them.  Nothing here allocates, locks,
 * sets errno or makes a system call: all of it may run on a hot path, on
 * any thread.
 */
#ifndef TB_ITCH_H
#define TB_ITCH_H

#include "tools/md/mold.h"

#include <stddef.h>
#include <stdint.h>

enum tb_itch_error {
	TB_ITCH_EEMPTY = -111,    /* zero-length message */
	TB_ITCH_ETYPE = -112,     /* message type not known here */
	TB_ITCH_EMSGLEN = -113,   /* length does not match the type's */
	TB_ITCH_EFIELD = -114,    /* a field holds an impossible value */
	TB_ITCH_ENOSPACE = -115,  /* encode: the buffer is too small */
};

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
