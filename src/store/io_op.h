// Internal to the engines: one read's progress and the rules both engines
// follow for short reads, errors and retries; per-drive queues of requests
// not yet started.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "store/io_engine.h"

namespace deltafin::store::detail {

int64_t now_ns();

struct ReadOp {
  ReadRequest req;
  AlignedSpan span;
  int drive = 0;
  uint64_t done = 0;       // bytes of span landed, counted from span.offset
  int errors = 0;          // failed attempts so far
  int attempts = 1;
  int64_t submit_ns = 0;

  // The next raw read: [offset, offset + length) into dest + done.
  uint64_t next_offset() const { return span.offset + done; }
  uint64_t next_length(uint64_t max_chunk) const;
  uint8_t* next_dest() const { return req.dest + done; }
};

ReadOp make_op(const ReadRequest& r, const FileInfo& f);

enum class Step { Done, Again, Failed };

// Applies one raw read result (bytes, or -errno) to `op`:
//  - payload covered: verify the checksum if asked -> Done (or Again/Failed
//    on a mismatch, which counts as an error);
//  - short read: continue from the last aligned byte landed -> Again;
//  - end of file before the payload ends -> Failed (not retried);
//  - error, or no progress: Again while errors <= retries, then Failed.
// On Failed, *error is the one-line message naming the file and offset.
Step advance(ReadOp& op, int64_t result, const FileInfo& f, const IoOptions& opts,
             std::string* error);

Completion complete(const ReadOp& op);

// Requests not yet started, one FIFO per drive, and the count in flight per
// drive (at most queue_depth).
class DriveQueues {
 public:
  explicit DriveQueues(int queue_depth) : qd_(queue_depth) {}
  // Urgent ops go after the drive's queued urgent ops, before the others.
  void push(ReadOp op);
  // Moves a queued op among the urgent ones; false if it is not queued.
  bool promote(uint64_t tag);
  // Takes the next op of a drive with room, round-robin over drives; marks it
  // in flight. Returns false when none can start.
  bool pop_startable(ReadOp* op);
  void finished(int drive);  // an op of `drive` left flight
  bool cancel(uint64_t tag, ReadOp* removed);
  size_t waiting() const { return waiting_; }
  size_t in_flight() const { return in_flight_total_; }
  uint64_t queued_bytes(int drive) const;
  void add_bytes(int drive, int64_t delta);
  // Every op still waiting (used by destructors to drop them).
  void clear();

 private:
  void grow(int drive);
  int qd_;
  std::vector<std::deque<ReadOp>> wait_;
  std::vector<int> flight_;
  std::vector<uint64_t> bytes_;
  size_t waiting_ = 0, in_flight_total_ = 0;
  size_t next_drive_ = 0;
};

std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& opts);
std::unique_ptr<IoEngine> make_pread_engine(const IoOptions& opts);

}  // namespace deltafin::store::detail
