/*
 * tickbus_err.h - result codes of the tickbus C API (public, installed).
 *
 * Hot-path results are small negative numbers so that a caller can test
 * `n < 0` once; set-up errors start at -20.  tb_strerror() names every code,
 * tb_errmsg() gives the detailed message of the last set-up failure on this
 * thread.
 */
#ifndef TICKBUS_ERR_H
#define TICKBUS_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

enum tb_result {
	TB_OK = 0,

	/* Conditions reported by the hot path (tb_pub_offer, tb_sub_poll). */
	TB_BACK_PRESSURED = -1, /* a subscriber has no room and the stream is
				   configured for back-pressure: retry later */
	TB_NOT_CONNECTED = -2,  /* no publisher (or no subscriber) yet */
	TB_LAPPED = -3,         /* this reader was overrun; tb_sub_loss() gives
				   the missing range */
	TB_CLOSED = -4,         /* the publisher closed the stream cleanly */
	TB_DATA_LOSS = -5,      /* messages were lost for good; see
				   tb_sub_loss() */
	TB_NEW_EPOCH = -6,      /* the publisher restarted: sequence numbers
				   start again from 1 */
	TB_PUBLISHER_DEAD = -7, /* the publisher stopped without closing (or,
				   rc, could not be reached again after the
				   connection broke) */
	TB_GAP = -8,            /* a gap was detected and is being recovered
				   or reported; see tb_sub_loss() */
	TB_EVICTED = -9,        /* the publisher, alive, dropped this
				   subscriber (its liveness reports stopped
				   reaching it, or its queue pair failed);
				   it reconnects, and what it missed comes
				   back as a loss */

	/* Set-up errors: a message is left in tb_errmsg(). */
	TB_EINVAL = -20,     /* bad argument */
	TB_ECONFIG = -21,    /* bad configuration file or value */
	TB_ENOMEM = -22,     /* out of memory */
	TB_ESYS = -23,       /* a system call failed */
	TB_EIO = -24,        /* input/output error */
	TB_EFORMAT = -25,    /* bad magic, version or corrupt data */
	TB_EMSGSIZE = -26,   /* message too large for the stream */
	TB_ENOTSUP = -27,    /* not supported on this build or machine */
	TB_EBUSY = -28,      /* resource in use (another publisher owns it) */
	TB_ETIMEDOUT = -29,  /* no answer in time */
	TB_EAUTH = -30,      /* authentication failed */
	TB_EPROTO = -31,     /* malformed protocol message */
	TB_ENOENT = -32,     /* no such stream, file or device */
	TB_ESTATE = -33,     /* call not valid in the current state */
};

/* Name and one-line meaning of a result code; never NULL.  Errors: none. */
const char *tb_strerror(int code);

/* Detailed message of the last set-up error on this thread ("" if none).
 * Errors: none. */
const char *tb_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif
