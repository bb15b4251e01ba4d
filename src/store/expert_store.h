// ExpertStore: reads expert records of a packed store by (layer, expert).
//
// Opens the manifest, the drives (directories) and every data file once on
// an IoEngine the caller owns, then turns each request into one read, or two
// for a split-homed read across mirrors (plan_read over the drives' profiles
// and queued bytes), each cut into pieces of StoreOptions::chunk_bytes, and returns one completion per record when all its
// bytes have landed. Like the engine, it is driven by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/drive.h"
#include "store/io_engine.h"
#include "store/manifest.h"

namespace deltafin::store {

struct StoreOptions {
  // Drive directories now, in the manifest's order; empty: the manifest's.
  std::vector<std::string> drives;
  MissingDrive missing = MissingDrive::Fail;  // Skip: read mirrors instead
  bool verify_reads = false;                  // check every record's XXH64
  bool split_reads = true;                    // allow split-homed reads
  // Each read of a record is issued as consecutive pieces of at most this
  // many bytes (rounded down to the alignment; 0: whole). The engine's queue
  // depth then counts pieces, so a drive works through its records in order
  // and each record lands as soon as its own bytes are in, instead of all the
  // records in flight landing together at the end (measured in
  // bench/results/streaming-*.md).
  uint64_t chunk_bytes = 0;
};

struct RecordCompletion {
  uint64_t tag = 0;
  const Record* record = nullptr;
  const uint8_t* bytes = nullptr;  // record->length bytes (== the caller's dest)
  int parts = 1;                   // 2 for a split-homed read
  int attempts = 1;                // reads issued, > parts when any was retried
  double latency_s = 0;            // request() to the last part landing
};

class ExpertStore {
 public:
  // Throws Error naming the manifest, a drive or a file that cannot be used.
  ExpertStore(const std::string& store_dir, IoEngine& engine, StoreOptions opts = {});

  const Manifest& manifest() const { return manifest_; }
  const DriveSet& drives() const { return drives_; }
  DriveSet& drives() { return drives_; }

  // The buffer a record needs: bytes and alignment (O_DIRECT reads may
  // write up to the next alignment boundary past the record).
  uint64_t buffer_bytes(const Record& r) const;
  size_t buffer_alignment() const { return align_; }

  // Issues the reads of (layer, expert) into dest. Throws Error when the
  // store has no such record or none of its drives is available.
  // REQUIRES: dest aligned to buffer_alignment(), buffer_bytes() long, valid
  // until its completion returns or cancel() returns true; tag unique among
  // outstanding requests.
  // urgent: a demand read, ahead of the queued prefetches (ReadRequest::urgent).
  const Record& request(int layer, int expert, uint8_t* dest, uint64_t tag, bool urgent = true);
  // Makes the not yet started pieces of a request urgent (a prefetch that
  // compute now waits for). False if the tag is unknown.
  bool promote(uint64_t tag);

  // As IoEngine::poll / wait, per record. A record whose read failed (after
  // the engine's retries), or whose checksum does not match with
  // verify_reads, is thrown as ReadError (tag() = the record's tag) naming
  // file and offset, once none of its reads is in flight any more.
  size_t poll(std::vector<RecordCompletion>& out);
  size_t wait(std::vector<RecordCompletion>& out, size_t min_count = 1);

  // Removes a record request none of whose reads has started; true if so
  // (no completion comes for it). False: it will complete (or is unknown).
  bool cancel(uint64_t tag);
  // Requests neither returned by poll()/wait() nor cancelled.
  size_t outstanding() const { return pending_.size() + ready_.size(); }

  // Payload bytes landed per drive since opening (for --stats).
  uint64_t bytes_read(int drive) const { return bytes_read_.at(drive); }

 private:
  struct Part {
    uint64_t io_tag;
    int copy;  // index into record->copies
    ReadRequest req;
  };
  struct Pending {
    const Record* record = nullptr;
    uint8_t* dest = nullptr;
    std::vector<Part> parts;
    int resolved = 0;  // parts landed or failed
    int attempts = 0;  // engine attempts of the landed parts, plus re-reads
    int64_t start_ns = 0;
    std::string error;  // the first part's failure
  };
  void step(bool block);  // one engine poll (or wait for one read)
  void resolve(uint64_t tag, Pending& p);
  size_t deliver(std::vector<RecordCompletion>& out);
  ReadRequest part_request(const Record& r, int copy, uint64_t off, uint64_t len, uint8_t* dest,
                           uint64_t io_tag) const;

  Manifest manifest_;
  IoEngine& engine_;
  StoreOptions opts_;
  DriveSet drives_;
  size_t align_ = 4096;
  std::vector<int> file_ids_;  // manifest file -> engine file id (-1: drive unavailable)
  std::unordered_map<uint64_t, Pending> pending_;  // by caller tag
  std::unordered_map<uint64_t, uint64_t> io_to_tag_;
  uint64_t next_io_tag_ = 1;
  std::vector<uint64_t> bytes_read_;
  std::vector<Completion> scratch_;
  std::deque<RecordCompletion> ready_;
  std::deque<ReadError> failed_;
};

}  // namespace deltafin::store
