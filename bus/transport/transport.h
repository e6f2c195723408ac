/*
 * transport.h - the one small interface behind which every transport sits.
 *
 * Publishing side (tb_tx_t).  Every publisher writes frames into a ring
 * (ring.h) that its transport provides: for shm the ring is the shared file
 * itself and committing a frame is publishing it; for rc, ud and udp the
 * ring is the publisher's private memory and the transport's `send` carries
 * the frames committed since the last call to the subscribers.  The
 * publisher's hot path is therefore the same for every transport:
 *
 *   room?   -> claim -> fill -> commit -> send(from, to)
 *
 * where `room` (back-pressure) and `send` may be NULL for transports that
 * need neither.
 *
 * Subscribing side (tb_rx_t).  A transport's `poll` delivers frames in
 * sequence order with the shared tracker (seq.h) and returns a count or a
 * condition, exactly as tb_sub_poll documents.
 *
 * Each transport lives in bus/transport/<name>.c and exports one
 * tb_<name>_tx_ops and one tb_<name>_rx_ops; bus/transport/transport.c maps the
 * configured tb_transport_t to them.
 *
 * Threads: ops marked "hot" are called from the single publishing or
 * polling thread and must not allocate, lock or make a system call; the
 * others are set-up calls.
 */
#ifndef TB_TRANSPORT_H
#define TB_TRANSPORT_H

#include "bus/ring.h"
#include "bus/seq.h"
#include <tickbus/tickbus.h>

typedef struct tb_tx tb_tx_t;
typedef struct tb_rx tb_rx_t;

typedef struct tb_tx_ops {
	const char *name;
	/* Creates the transport's ring and endpoint for a new epoch. */
	int (*open)(tb_tx_t **tx, const tb_stream_cfg_t *cfg, uint64_t epoch);
	/* Hot, may be NULL: 0 if the ring may advance to `new_tail` without
	 * overrunning a subscriber the stream waits for, else
	 * TB_BACK_PRESSURED (or TB_NOT_CONNECTED). */
	int (*room)(tb_tx_t *tx, uint64_t new_tail);
	/* Hot, may be NULL: frames in ring positions [from, to) were just
	 * committed.  Returns 0 or a negative condition. */
	int (*send)(tb_tx_t *tx, uint64_t from, uint64_t to);
	/* May be NULL: sends whatever a batching transport holds. */
	int (*flush)(tb_tx_t *tx);
	/* Called every heartbeat_ms from the publisher's background thread. */
	void (*beat)(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq);
	/* Announces the end of the stream at `final_seq` and frees. */
	void (*close)(tb_tx_t *tx, uint64_t final_seq);
	/* May be NULL (a transport that cannot tell: shm, multicast): the
	 * subscribers the stream sends to now.  Publishing thread. */
	int (*subscribers)(tb_tx_t *tx);
} tb_tx_ops_t;

/* The first member of every transport's publishing state. */
struct tb_tx {
	tb_ring_t ring;
	const tb_tx_ops_t *ops;
};

typedef struct tb_rx_ops {
	const char *name;
	int (*open)(tb_rx_t **rx, const tb_stream_cfg_t *cfg);
	/* Hot: see tb_sub_poll.  `loss` receives the range of a TB_LAPPED or
	 * TB_GAP result. */
	int (*poll)(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		    tb_handler_t handler, void *clientd, int limit);
	/* The epoch being followed; 0 before the first. */
	uint64_t (*epoch)(const tb_rx_t *rx);
	void (*close)(tb_rx_t *rx);
} tb_rx_ops_t;

/* The first member of every transport's subscribing state.  `ctr` is the
 * subscriber's counters slot (counters.h), set after open, for transports
 * that count duplicates and malformed input themselves; NULL until then. */
struct tb_rx {
	const tb_rx_ops_t *ops;
	struct tb_counter_slot *ctr;
};

/* The ops of `t`, or NULL (with a message) when this build lacks it. */
const tb_tx_ops_t *tb_tx_ops_for(tb_transport_t t);
const tb_rx_ops_t *tb_rx_ops_for(tb_transport_t t);

extern const tb_tx_ops_t tb_shm_tx_ops;
extern const tb_rx_ops_t tb_shm_rx_ops;
extern const tb_tx_ops_t tb_rc_tx_ops;
extern const tb_rx_ops_t tb_rc_rx_ops;
extern const tb_tx_ops_t tb_udp_tx_ops;
extern const tb_rx_ops_t tb_udp_rx_ops;
extern const tb_tx_ops_t tb_ud_tx_ops;
extern const tb_rx_ops_t tb_ud_rx_ops;

#endif
