/*
 * transport/verbs_events.c - reading a device's asynchronous events (the
 * design is in verbs_events.h).
 */
#include "bus/transport/verbs_events.h"

#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>

int tb_verbs_events_init(tb_verbs_dev_t *d)
{
	int fl = fcntl(d->ctx->async_fd, F_GETFL);

	if (fl < 0 || fcntl(d->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return tb_error_sys(errno, "%s: make the async event fd "
				    "non-blocking", d->name);
	return 0;
}

int tb_verbs_events_fd(const tb_verbs_dev_t *d)
{
	return d->ctx->async_fd;
}

tb_verbs_event_kind_t tb_verbs_event_kind_of(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		return TB_VERBS_EV_QP_FATAL;
	case IBV_EVENT_CQ_ERR:
		return TB_VERBS_EV_CQ_ERR;
	case IBV_EVENT_PORT_ERR:
		return TB_VERBS_EV_PORT_DOWN;
	case IBV_EVENT_PORT_ACTIVE:
		return TB_VERBS_EV_PORT_UP;
	case IBV_EVENT_GID_CHANGE:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
		return TB_VERBS_EV_ADDR_CHANGE;
	case IBV_EVENT_DEVICE_FATAL:
		return TB_VERBS_EV_DEVICE_FATAL;
	default:
		return TB_VERBS_EV_OTHER;
	}
}

int tb_verbs_events_next(tb_verbs_dev_t *d, tb_verbs_event_t *ev)
{
	struct ibv_async_event e;

	if (ibv_get_async_event(d->ctx, &e) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return 0;
		return tb_error_sys(errno, "%s: ibv_get_async_event", d->name);
	}
	*ev = (tb_verbs_event_t){.kind = tb_verbs_event_kind_of(e.event_type),
				 .type = e.event_type};
	switch (ev->kind) {
	case TB_VERBS_EV_QP_FATAL:
		ev->qp = e.element.qp;
		break;
	case TB_VERBS_EV_CQ_ERR:
		ev->cq = e.element.cq;
		break;
	case TB_VERBS_EV_PORT_DOWN:
	case TB_VERBS_EV_PORT_UP:
	case TB_VERBS_EV_ADDR_CHANGE:
		ev->port = e.element.port_num;
		break;
	default:
		break;
	}
	/* Acknowledged now: a QP or CQ cannot be destroyed while one of its
	 * events is unacknowledged, and the caller may want to. */
	ibv_ack_async_event(&e);
	return 1;
}

int tb_verbs_event_on_port(const tb_verbs_dev_t *d, const tb_verbs_event_t *ev)
{
	return (ev->kind == TB_VERBS_EV_PORT_DOWN || ev->kind == TB_VERBS_EV_PORT_UP ||
		ev->kind == TB_VERBS_EV_ADDR_CHANGE) && ev->port == d->port;
}

const char *tb_verbs_event_name(const tb_verbs_event_t *ev)
{
	return ibv_event_type_str(ev->type);
}
