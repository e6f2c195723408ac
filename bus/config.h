/*
 * config.h - internal helpers of the configuration module (bus/config.c).
 *
 * The public part (tb_stream_cfg_init, tb_stream_cfg_validate, tb_config_*)
 * is declared in tickbus.h.  What is here is shared with the rest of the
 * library and the tools, and is not installed.  All are set-up calls: they
 * return 0 or TB_ECONFIG and leave a message in tb_errmsg().
 */
#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include <tickbus/tickbus.h>

#include <stddef.h>

/* A stream whose shm_path is empty uses this prefix followed by its name. */
#define TB_SHM_PATH_PREFIX "/dev/shm/tickbus."

/* Writes the ring path of a shm stream to `buf`: cfg->shm_path, or
 * TB_SHM_PATH_PREFIX<name> when shm_path is empty.  tb_config_load fills
 * the default already; this is for structs filled by hand. */
int tb_stream_cfg_shm_path(const tb_stream_cfg_t *cfg, char *buf, size_t len);

/* "shm", "rc", "ud" or "udp" (the spelling of the `transport` key); "?"
 * for a value out of range. */
const char *tb_config_transport_name(tb_transport_t t);

/* Parses "host:port" or "[ipv6]:port" strictly, as the config keys
 * control and recovery do (port 1..65535, host 1..63 characters). */
int tb_config_endpoint_parse(tb_endpoint_t *ep, const char *text);

#endif
