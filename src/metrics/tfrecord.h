/* metrics/tfrecord.h: the TFRecord framing of TensorBoard event files, checksummed with
 * CRC-32C (core/crc32c.h). A record is
 *
 *     uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
 *
 * where masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xa282ead8. A reader checks both sums, so a
 * file cut short mid-record (a killed run) still reads up to its last whole record. Plain bytes:
 * no protobuf here (tb_writer.c encodes the messages). */
#ifndef BT_METRICS_TFRECORD_H
#define BT_METRICS_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "baton/status.h"

/* TFRecord's mask of a CRC: rotate right by 15 bits, add 0xa282ead8. */
uint32_t bt_crc32c_mask(uint32_t crc);
/* The 12-byte header (length, masked CRC of the length) and 4-byte footer (masked CRC of the
 * data) of a record holding n bytes of data. */
void bt_tfrecord_frame(const void *data, size_t n, unsigned char header[12], unsigned char footer[4]);
/* Writes one framed record to f. BT_ERR_IO (naming path) if a write fails. */
bt_status bt_tfrecord_write(FILE *f, const char *path, const void *data, size_t n);

#endif
