/*
 * The device, its context and protection domains (the port is port.c).
 *
 * softrdma0 reports itself as a ConnectX-5 (vendor 0x02c9, part 4119) so
 * that tools take their mlx5 paths (perftest's extended send API and inline
 * sizes); its limits are softrdma's own.  Each context registers its id in
 * the process's fabric slot, where port events (softrdma-ctl) find it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef ibv_query_port

/* A locally administered EUI-64, as a RoCE NIC derives one from its MAC. */
#define SR_NODE_GUID 0x020000fffe5e0001ull

static struct ibv_device sr_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = SR_DEV_NAME,
	.dev_name = "uverbs_softrdma0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs_softrdma0",
	.ibdev_path = "/sys/class/infiniband/softrdma0",
};

SR_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	SR_FAULT_RET("ibv_get_device_list", NULL);
	struct ibv_device **l = calloc(2, sizeof *l);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &sr_device;
	if (num_devices)
		*num_devices = 1;
	return l;
}
SR_DEFAULT_V11(ibv_get_device_list);

SR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}
SR_DEFAULT_V11(ibv_free_device_list);

SR_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}
SR_DEFAULT_V11(ibv_get_device_name);

SR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	return htobe64(SR_NODE_GUID);
}
SR_DEFAULT_V11(ibv_get_device_guid);

SR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device == &sr_device ? 0 : -1;
}

static int sr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad)
{
	(void)srq;
	*bad = wr;
	return EOPNOTSUPP;
}

static void fill_device_attr(struct ibv_device_attr *a)
{
	memset(a, 0, sizeof *a);
	strcpy(a->fw_ver, "softrdma-1");
	a->node_guid = htobe64(SR_NODE_GUID);
	a->sys_image_guid = htobe64(SR_NODE_GUID);
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 4096;
	a->vendor_id = SR_VENDOR_ID;
	a->vendor_part_id = SR_VENDOR_PART_ID;
	a->hw_ver = 0;
	a->max_qp = SR_MAX_QPS;
	a->max_qp_wr = SR_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN |
			      IBV_DEVICE_PORT_ACTIVE_EVENT |
			      IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_MGT_EXTENSIONS;
	a->max_sge = SR_MAX_SGE;
	a->max_sge_rd = SR_MAX_SGE;
	a->max_cq = SR_MAX_CQS;
	a->max_cqe = SR_MAX_CQE;
	a->max_mr = SR_MAX_MRS;
	a->max_pd = SR_MAX_PD;
	a->max_qp_rd_atom = SR_MAX_RD_ATOM;
	a->max_qp_init_rd_atom = SR_MAX_RD_ATOM;
	a->max_res_rd_atom = SR_MAX_RD_ATOM * SR_MAX_QPS;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_pkeys = SR_PKEY_TBL_LEN;
	a->max_ah = 65536;
	a->max_mcast_grp = SR_MAX_MCG;
	a->max_mcast_qp_attach = SR_MCG_MEMBERS;
	a->max_total_mcast_qp_attach = SR_MAX_MCG * SR_MCG_MEMBERS;
	a->local_ca_ack_delay = 8;
	a->phys_port_cnt = 1;
}

SR_EXPORT int ibv_query_device(struct ibv_context *context,
			       struct ibv_device_attr *attr)
{
	(void)context;
	SR_FAULT_RET("ibv_query_device", errno);
	fill_device_attr(attr);
	return 0;
}
SR_DEFAULT_V11(ibv_query_device);

static int sr_query_device_ex(struct ibv_context *context,
			      const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t attr_size)
{
	(void)context;
	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof attr->orig_attr)
		return EINVAL;
	memset(attr, 0, attr_size);
	fill_device_attr(&attr->orig_attr);
	if (attr_size >= offsetof(struct ibv_device_attr_ex, device_cap_flags_ex) +
			 sizeof attr->device_cap_flags_ex)
		attr->device_cap_flags_ex = attr->orig_attr.device_cap_flags |
					    IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	return 0;
}

int sr_query_port_ex(struct ibv_context *context, uint8_t port_num,
		     struct ibv_port_attr *attr, size_t len);

SR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	SR_FAULT_RET("ibv_open_device", NULL);
	if (device != &sr_device) {
		errno = ENODEV;
		return NULL;
	}
	struct sr_context *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fab = sr_fabric_attach();
	if (!c->fab) {
		int e = errno;
		free(c);
		errno = e;
		return NULL;
	}
	c->id = sr_fabric_next_id(c->fab);
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->num_comp_vectors = 1;
	ctx->async_fd = sr_fabric_bind_socket(c->fab, 'a', c->id);
	if (ctx->async_fd < 0) {
		int e = errno;
		sr_fabric_detach(c->fab);
		free(c);
		errno = e;
		return NULL;
	}
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->ops.poll_cq = sr_poll_cq;
	ctx->ops.req_notify_cq = sr_req_notify_cq;
	ctx->ops.post_send = sr_post_send;
	ctx->ops.post_recv = sr_post_recv;
	ctx->ops.post_srq_recv = sr_post_srq_recv;
	ctx->ops.alloc_mw = sr_alloc_mw;
	ctx->ops.bind_mw = sr_bind_mw;
	ctx->ops.dealloc_mw = sr_dealloc_mw;
	/* Extended context: every op left NULL makes its verbs.h inline
	 * return EOPNOTSUPP (verbs_get_ctx_op checks both sz and NULL). */
	c->vctx.sz = sizeof(struct verbs_context);
	c->vctx.query_port = sr_query_port_ex;
	c->vctx.query_device_ex = sr_query_device_ex;
	c->vctx.create_qp_ex = sr_create_qp_ex;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	/* Port events (softrdma-ctl) reach every context of the process. */
	struct sr_proc_shm *ps = sr_fabric_proc(c->fab, c->fab->proc);
	for (int i = 0; i < SR_CTX_PER_PROC; i++) {
		uint32_t z = 0;
		if (atomic_compare_exchange_strong(&ps->ctx[i], &z, c->id))
			break;
	}
	return ctx;
}
SR_DEFAULT_V11(ibv_open_device);

SR_EXPORT int ibv_close_device(struct ibv_context *context)
{
	SR_FAULT_RET("ibv_close_device", -1);
	struct sr_context *c = sr_ctx(context);
	struct sr_proc_shm *ps = sr_fabric_proc(c->fab, c->fab->proc);
	for (int i = 0; i < SR_CTX_PER_PROC; i++) {
		uint32_t id = c->id;
		atomic_compare_exchange_strong(&ps->ctx[i], &id, 0);
	}
	close(context->async_fd);
	pthread_mutex_destroy(&context->mutex);
	sr_fabric_detach(c->fab);
	free(c);
	return 0;
}
SR_DEFAULT_V11(ibv_close_device);

SR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	SR_FAULT_RET("ibv_alloc_pd", NULL);
	struct sr_pd *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = context;
	p->id = sr_fabric_next_id(sr_ctx(context)->fab);
	p->pd.handle = p->id;
	return &p->pd;
}
SR_DEFAULT_V11(ibv_alloc_pd);

SR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	SR_FAULT_RET("ibv_dealloc_pd", errno);
	struct sr_pd *p = (struct sr_pd *)pd;
	if (atomic_load(&p->refs))
		return EBUSY;
	free(p);
	return 0;
}
SR_DEFAULT_V11(ibv_dealloc_pd);

/* Nothing is pinned, so fork needs no preparation. */
SR_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

SR_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base; (void)size;
	return 0;
}

SR_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base; (void)size;
	return 0;
}
