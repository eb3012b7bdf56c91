/* fuzz_safetensors_header.c — libFuzzer target for the strict safetensors
 * header parser: the input is a whole file (8-byte size, header, data). */
#include <stdint.h>
#include <stdlib.h>

#include "convert/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t prefix[8] = {0};
  for (size_t i = 0; i < 8 && i < size; i++) prefix[i] = data[i];
  uint64_t hlen = 0;
  dcpi_err err;
  if (dcpi_st_header_len(prefix, size, &hlen, &err) != DCP_OK) return 0;
  dcpi_st_header *h = NULL;
  if (dcpi_st_parse((const char *)data + 8, (size_t)hlen, size - 8 - hlen, &h, &err) == DCP_OK) {
    /* a parsed header tiles the data region exactly */
    uint64_t at = 0;
    for (size_t i = 0; i < h->ntensors; i++) {
      if (h->tensors[i].begin != at) abort();
      at = h->tensors[i].end;
    }
    if (at != h->data_len) abort();
    dcpi_st_header_free(h);
  }
  return 0;
}
