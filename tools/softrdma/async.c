/*
 * Asynchronous events.  Each context owns an abstract unix datagram socket,
 * which is its async_fd; any process that detects an error affecting an
 * object (a responder QP put in error by a bad request, a CQ overrun) sends
 * it a small message naming the object.  ibv_get_async_event reads one and
 * maps it back to this process's ibv_qp / ibv_cq.  The fd honours O_NONBLOCK
 * and works with poll(), as the real async_fd does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <sys/socket.h>

void sr_async_post(struct sr_fabric *f, pid_t pid, uint32_t ctx_id,
		   uint32_t type, uint32_t kind, uint32_t slot, uint32_t id)
{
	struct sr_async_msg m = {type, kind, slot, id};
	sr_fabric_notify(f, pid, 'a', ctx_id, &m, sizeof m);
}

SR_EXPORT int ibv_get_async_event(struct ibv_context *context,
				  struct ibv_async_event *event)
{
	SR_FAULT_RET("ibv_get_async_event", -1);
	for (;;) {
		struct sr_async_msg m;
		ssize_t n = recv(context->async_fd, &m, sizeof m, 0);
		if (n < 0)
			return -1;
		if (n != sizeof m)
			continue;
		event->event_type = (enum ibv_event_type)m.type;
		if (m.kind == SR_SLOT_QP && m.slot < SR_MAX_QPS) {
			struct sr_qp *qp = atomic_load(&sr_local_qp[m.slot]);
			if (!qp || qp->qp.qp_num != m.id ||
			    qp->qp.context != context)
				continue; /* destroyed since */
			event->element.qp = &qp->qp;
		} else if (m.kind == SR_SLOT_CQ && m.slot < SR_MAX_CQS) {
			struct sr_cq *cq = atomic_load(&sr_local_cq[m.slot]);
			if (!cq || cq->shm->id != m.id || cq->cq.context != context)
				continue;
			event->element.cq = &cq->cq;
		} else {
			event->element.port_num = (int)m.slot; /* PORT_ERR, ... */
		}
		return 0;
	}
}
SR_DEFAULT_V11(ibv_get_async_event);

SR_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	}
	default:
		break;
	}
}
SR_DEFAULT_V11(ibv_ack_async_event);
