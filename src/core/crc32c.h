/* core/crc32c.h: CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78, initial value
 * and final xor 0xFFFFFFFF), the checksum of iSCSI, ext4 and many storage formats. Checkpoints
 * store one per tensor (see train/checkpoint.h). Check value: CRC-32C("123456789") = 0xE3069283.
 * Portable C (slicing by 8, about 1-2 GB/s); the result never depends on the machine. */
#ifndef BT_CORE_CRC32C_H
#define BT_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of size bytes at data, continuing from crc (0 for a new checksum), so that
 * bt_crc32c(bt_crc32c(0, a, n), b, m) equals the CRC of a followed by b. */
uint32_t bt_crc32c(uint32_t crc, const void *data, size_t size);

#endif
