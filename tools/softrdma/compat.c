/*
 * Symbols that exist for binary compatibility, and verbs not implemented yet.
 *
 * - The IBVERBS_1.0 versions of the classic verbs served the pre-2006 ABI,
 *   whose structures differ from today's; nothing built against a current
 *   rdma-core binds to them.  They fail with ENOSYS.
 * - IBVERBS_PRIVATE_34 is rdma-core's interface to its kernel providers
 *   (ibv_cmd_*, verbs_*); softrdma loads no provider, so these fail with
 *   EOPNOTSUPP.  They exist so that a binary linked against them loads.
 * - Verbs softrdma does not implement yet (SRQ, address handles from a
 *   work completion, import, sysfs helpers) fail as on a device without the capability.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <stdbool.h>

#define SYMVER(impl, name_ver) __asm__(".symver " #impl "," name_ver)

/* ---- IBVERBS_1.0: legacy ABI ---- */

#define V10(type, name, body)                                          \
	SR_EXPORT type sr_v10_##name(void);                            \
	type sr_v10_##name(void) { body }                              \
	SYMVER(sr_v10_##name, #name "@IBVERBS_1.0");
#define V10_PTR(name) V10(void *, name, errno = ENOSYS; return NULL;)
#define V10_INT(name) V10(int, name, errno = ENOSYS; return -1;)
#define V10_VOID(name) V10(void, name, )

V10_PTR(ibv_alloc_pd)
V10_PTR(ibv_create_ah)
V10_PTR(ibv_create_cq)
V10_PTR(ibv_create_qp)
V10_PTR(ibv_create_srq)
V10_PTR(ibv_get_device_list)
V10_PTR(ibv_get_device_name)
V10_PTR(ibv_open_device)
V10_PTR(ibv_reg_mr)
V10_VOID(ibv_ack_async_event)
V10_VOID(ibv_ack_cq_events)
V10_VOID(ibv_free_device_list)
V10(uint64_t, ibv_get_device_guid, return 0;)
V10_INT(ibv_attach_mcast)
V10_INT(ibv_close_device)
V10_INT(ibv_dealloc_pd)
V10_INT(ibv_dereg_mr)
V10_INT(ibv_destroy_ah)
V10_INT(ibv_destroy_cq)
V10_INT(ibv_destroy_qp)
V10_INT(ibv_destroy_srq)
V10_INT(ibv_detach_mcast)
V10_INT(ibv_get_async_event)
V10_INT(ibv_get_cq_event)
V10_INT(ibv_modify_qp)
V10_INT(ibv_modify_srq)
V10_INT(ibv_query_device)
V10_INT(ibv_query_gid)
V10_INT(ibv_query_pkey)
V10_INT(ibv_query_port)
V10_INT(ibv_query_qp)
V10_INT(ibv_query_srq)
V10_INT(ibv_resize_cq)

/* Drivers registered themselves with this before providers were plugins. */
SR_EXPORT void sr_v11_ibv_register_driver(void);
void sr_v11_ibv_register_driver(void)
{
}
SYMVER(sr_v11_ibv_register_driver, "ibv_register_driver@IBVERBS_1.1");

/* Kernel-ABI marshalling helpers (infiniband/marshall.h): nothing to
 * marshall without a kernel; they leave dst untouched. */
SR_EXPORT void ibv_copy_qp_attr_from_kern(void *dst, const void *src);
void ibv_copy_qp_attr_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
SR_EXPORT void ibv_copy_ah_attr_from_kern(void *dst, const void *src);
void ibv_copy_ah_attr_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
SR_EXPORT void ibv_copy_path_rec_from_kern(void *dst, const void *src);
void ibv_copy_path_rec_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
SR_EXPORT void ibv_copy_path_rec_to_kern(void *dst, const void *src);
void ibv_copy_path_rec_to_kern(void *dst, const void *src) { (void)dst; (void)src; }

SR_EXPORT const char *ibv_get_sysfs_path(void);
const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

SR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
				  size_t size);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size)
{
	(void)dir; (void)file; (void)buf; (void)size;
	errno = ENOENT;
	return -1;
}

/* ---- not implemented yet ---- */

SR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
					 struct ibv_srq_init_attr *attr)
{
	(void)pd; (void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}
SR_DEFAULT_V11(ibv_create_srq);

SR_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			     int mask)
{
	(void)srq; (void)attr; (void)mask;
	return EOPNOTSUPP;
}
SR_DEFAULT_V11(ibv_modify_srq);

SR_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	(void)srq; (void)attr;
	return EOPNOTSUPP;
}
SR_DEFAULT_V11(ibv_query_srq);

SR_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	(void)srq;
	return EOPNOTSUPP;
}
SR_DEFAULT_V11(ibv_destroy_srq);

SR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
					  struct ibv_ah_attr *attr,
					  uint8_t eth_mac[6], uint16_t *vid)
{
	(void)context; (void)attr; (void)eth_mac; (void)vid;
	return EOPNOTSUPP;
}

SR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context,
				       uint32_t pd_handle)
{
	(void)context; (void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

SR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd; (void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

SR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context,
				       uint32_t dm_handle)
{
	(void)context; (void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* ---- IBVERBS_PRIVATE_34: the provider interface ---- */

SR_EXPORT bool verbs_allow_disassociate_destroy;

#define PRIVATE(name)                                                  \
	SR_EXPORT int name(void);                                      \
	int name(void) { return EOPNOTSUPP; }

PRIVATE(__ioctl_final_num_attrs)
PRIVATE(__verbs_log)
PRIVATE(_verbs_init_and_alloc_context)
PRIVATE(execute_ioctl)
PRIVATE(ibv_cmd_advise_mr)
PRIVATE(ibv_cmd_alloc_dm)
PRIVATE(ibv_cmd_alloc_mw)
PRIVATE(ibv_cmd_alloc_pd)
PRIVATE(ibv_cmd_attach_mcast)
PRIVATE(ibv_cmd_close_xrcd)
PRIVATE(ibv_cmd_create_ah)
PRIVATE(ibv_cmd_create_counters)
PRIVATE(ibv_cmd_create_cq)
PRIVATE(ibv_cmd_create_cq_ex)
PRIVATE(ibv_cmd_create_flow)
PRIVATE(ibv_cmd_create_flow_action_esp)
PRIVATE(ibv_cmd_create_qp)
PRIVATE(ibv_cmd_create_qp_ex)
PRIVATE(ibv_cmd_create_qp_ex2)
PRIVATE(ibv_cmd_create_rwq_ind_table)
PRIVATE(ibv_cmd_create_srq)
PRIVATE(ibv_cmd_create_srq_ex)
PRIVATE(ibv_cmd_create_wq)
PRIVATE(ibv_cmd_dealloc_mw)
PRIVATE(ibv_cmd_dealloc_pd)
PRIVATE(ibv_cmd_dereg_mr)
PRIVATE(ibv_cmd_destroy_ah)
PRIVATE(ibv_cmd_destroy_counters)
PRIVATE(ibv_cmd_destroy_cq)
PRIVATE(ibv_cmd_destroy_flow)
PRIVATE(ibv_cmd_destroy_flow_action)
PRIVATE(ibv_cmd_destroy_qp)
PRIVATE(ibv_cmd_destroy_rwq_ind_table)
PRIVATE(ibv_cmd_destroy_srq)
PRIVATE(ibv_cmd_destroy_wq)
PRIVATE(ibv_cmd_detach_mcast)
PRIVATE(ibv_cmd_free_dm)
PRIVATE(ibv_cmd_get_context)
PRIVATE(ibv_cmd_modify_cq)
PRIVATE(ibv_cmd_modify_flow_action_esp)
PRIVATE(ibv_cmd_modify_qp)
PRIVATE(ibv_cmd_modify_qp_ex)
PRIVATE(ibv_cmd_modify_srq)
PRIVATE(ibv_cmd_modify_wq)
PRIVATE(ibv_cmd_open_qp)
PRIVATE(ibv_cmd_open_xrcd)
PRIVATE(ibv_cmd_poll_cq)
PRIVATE(ibv_cmd_post_recv)
PRIVATE(ibv_cmd_post_send)
PRIVATE(ibv_cmd_post_srq_recv)
PRIVATE(ibv_cmd_query_context)
PRIVATE(ibv_cmd_query_device_any)
PRIVATE(ibv_cmd_query_mr)
PRIVATE(ibv_cmd_query_port)
PRIVATE(ibv_cmd_query_qp)
PRIVATE(ibv_cmd_query_srq)
PRIVATE(ibv_cmd_read_counters)
PRIVATE(ibv_cmd_reg_dm_mr)
PRIVATE(ibv_cmd_reg_dmabuf_mr)
PRIVATE(ibv_cmd_reg_mr)
PRIVATE(ibv_cmd_req_notify_cq)
PRIVATE(ibv_cmd_rereg_mr)
PRIVATE(ibv_cmd_resize_cq)
PRIVATE(ibv_query_gid_type)
PRIVATE(ibv_read_ibdev_sysfs_file)
PRIVATE(verbs_init_cq)
PRIVATE(verbs_open_device)
PRIVATE(verbs_register_driver_34)
PRIVATE(verbs_set_ops)
PRIVATE(verbs_uninit_context)
