/*
 * config.h - internal helpers of the configuration module (bus/config.c).
 *
 * The public part (tb_stream_cfg_init, tb_stream_cfg_validate, tb_config_*)
 * is declared in tickbus.h.  What is here is shared with the rest of the
 * library and the tools, and is not installed.  All are set-up calls: they
 * return 0 or a negative TB_E* code (TB_ECONFIG for a bad value) and leave
 * a message in tb_errmsg().
 */
#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include <tickbus/tickbus.h>

#include <stddef.h>

/* A stream whose shm_path is empty uses this prefix followed by its name. */
#define TB_SHM_PATH_PREFIX "/dev/shm/tickbus."

/* The most a config file may hold: tb_config_load refuses a larger file
 * before it reads it.  Every example is under 4 KiB; 1 MiB holds
 * thousands of streams. */
#define TB_CONFIG_FILE_MAX (1u << 20)

/* Writes the ring path of a shm stream to `buf`: cfg->shm_path, or
 * TB_SHM_PATH_PREFIX<name> when shm_path is empty.  tb_config_load fills
 * the default already; this is for structs filled by hand. */
int tb_stream_cfg_shm_path(const tb_stream_cfg_t *cfg, char *buf, size_t len);

/* "shm", "rc", "ud" or "udp" (the spelling of the `transport` key); "?"
 * for a value out of range. */
const char *tb_config_transport_name(tb_transport_t t);

/*
 * Loads config file `path` (tb_config_load) and copies its stream `stream`
 * into *out: what tb_publisher_open_file and tb_subscriber_open_file both
 * do before opening.  Returns 0, tb_config_load's errors (TB_EINVAL,
 * TB_ECONFIG, TB_ENOMEM, TB_EIO, TB_ENOENT and the other open(2) failures
 * through tb_error_sys), or TB_ENOENT when the file has no such stream
 * (the message lists the streams it has).
 */
int tb_config_load_stream(tb_stream_cfg_t *out, const char *path,
			  const char *stream);

/*
 * Parses config text `text` (`len` bytes, not NUL-terminated, at most
 * TB_CONFIG_FILE_MAX) as tb_config_load parses a file, naming it `name` in
 * messages.  tb_config_load reads the file and calls this; the fuzz target
 * calls it directly.  Errors: tb_config_load's, but none of open(2)'s.
 */
int tb_config_load_buffer(tb_config_t **out, const char *name,
			  const void *text, size_t len);

/* Parses "host:port" or "[ipv6]:port" strictly, as the config keys
 * control and recovery do (port 1..65535, host 1..63 characters). */
int tb_config_endpoint_parse(tb_endpoint_t *ep, const char *text);

#endif
