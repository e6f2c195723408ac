/*
 * transport/verbs_events.h - a device's asynchronous events, read without
 * blocking and sorted by what a transport must do about them.
 *
 * A NIC reports some failures only here, never in a completion: a CQ that
 * overran (every completion after it is lost), a QP that hit a fatal error
 * outside a work request, a port that went down or came back, a GID or LID
 * that changed under us (peers then address a QP we no longer are).  An
 * event is read from the context's async fd (ibv_get_async_event) and must
 * be acknowledged before the QP or CQ it names can be destroyed; this
 * module acknowledges it at once and hands back a copy, so the QP and CQ
 * pointers in it are for comparing with a transport's own, never for use.
 *
 * Use, on a control thread:
 *
 *   tb_verbs_events_init(&dev);                  once, after tb_verbs_open
 *   poll() on tb_verbs_events_fd(&dev) with the thread's sockets
 *   while (tb_verbs_events_next(&dev, &ev) == 1)
 *           act on ev.kind (and ev.qp / ev.cq / ev.port)
 *
 * Threads: one thread reads a device's events.  Errors: set-up convention
 * (error.h).
 */
#ifndef TB_TRANSPORT_VERBS_EVENTS_H
#define TB_TRANSPORT_VERBS_EVENTS_H

#include "bus/transport/verbs.h"

#include <infiniband/verbs.h>

/* What an event asks of a transport. */
typedef enum tb_verbs_event_kind {
	/* ev.qp can carry nothing more: QP_FATAL, QP_REQ_ERR,
	 * QP_ACCESS_ERR, PATH_MIG_ERR.  Drop its peer (it reconnects). */
	TB_VERBS_EV_QP_FATAL = 1,
	/* ev.cq overran: completions were lost, so whatever counts them is
	 * wrong.  Drop what uses it and make a new one. */
	TB_VERBS_EV_CQ_ERR,
	/* ev.port went down: QPs on it retry until it returns or their
	 * retries run out.  Say so, loudly. */
	TB_VERBS_EV_PORT_DOWN,
	/* ev.port is active again. */
	TB_VERBS_EV_PORT_UP,
	/* ev.port's GID table, LID, P_Key table or subnet manager changed:
	 * tb_verbs_refresh() says whether our own address did. */
	TB_VERBS_EV_ADDR_CHANGE,
	/* The device is gone or broken: nothing on it works any more. */
	TB_VERBS_EV_DEVICE_FATAL,
	/* Anything else (last WQE reached, SRQ limit, path migrated, ...):
	 * nothing tickbus uses; logged. */
	TB_VERBS_EV_OTHER,
} tb_verbs_event_kind_t;

typedef struct tb_verbs_event {
	tb_verbs_event_kind_t kind;
	enum ibv_event_type type;  /* as the device reported it */
	const struct ibv_qp *qp;   /* QP events: which one (identity only) */
	const struct ibv_cq *cq;   /* CQ events: which one (identity only) */
	int port;                  /* port events: which port; else 0 */
} tb_verbs_event_t;

/* Makes d's async fd non-blocking, for tb_verbs_events_next.  0 or TB_ESYS. */
int tb_verbs_events_init(tb_verbs_dev_t *d);

/* The fd to poll() for POLLIN: an event is waiting. */
int tb_verbs_events_fd(const tb_verbs_dev_t *d);

/*
 * Takes the next event, acknowledged, into *ev without waiting: 1 when one
 * was there, 0 when none is, or TB_ESYS with a message (the fd broke).
 */
int tb_verbs_events_next(tb_verbs_dev_t *d, tb_verbs_event_t *ev);

/* The kind an event type falls in. */
tb_verbs_event_kind_t tb_verbs_event_kind_of(enum ibv_event_type type);

/* 1 when `ev` is a port event (down, up, address) about d's own port. */
int tb_verbs_event_on_port(const tb_verbs_dev_t *d, const tb_verbs_event_t *ev);

/* The event's name for logs ("IBV_EVENT_CQ_ERR" style: "CQ error"). */
const char *tb_verbs_event_name(const tb_verbs_event_t *ev);

#endif
