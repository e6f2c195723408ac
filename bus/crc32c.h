/*
 * crc32c.h - CRC32C (Castagnoli), the checksum of the retransmit store
 * (bus/recovery/store.c).
 *
 * `crc` is 0 to start, or a previous result to go on:
 * tb_crc32c(0, "123456789", 9) == 0xE3069283.  tb_crc32c picks the SSE4.2
 * instruction when the CPU has it, else the table; the two variants are
 * exported for the tests and the benchmark (tb_crc32c_hw returns the table
 * result when the CPU lacks SSE4.2; tb_crc32c_hw_available() says which).
 *
 * Threads: every function may be called from any thread.  No allocation,
 * lock or system call (the first table use runs a pthread_once).
 */
#ifndef TB_CRC32C_H
#define TB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of `len` bytes at `buf`, going on from `crc`; the fastest path
 * this CPU has. */
uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t len);

/* The same through the slicing-by-8 tables, whatever the CPU. */
uint32_t tb_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* The same through the SSE4.2 instruction, or the tables where the CPU
 * lacks it. */
uint32_t tb_crc32c_hw(uint32_t crc, const void *buf, size_t len);

/* 1 when the CPU has the SSE4.2 crc32 instruction, else 0. */
int tb_crc32c_hw_available(void);

#endif
