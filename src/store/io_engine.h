// The I/O engine: direct (O_DIRECT) reads of byte ranges of registered files,
// many in flight per drive, completions delivered as they land.
//
// Two implementations behind one interface: io_uring (the default) and a
// pread thread pool (`--io pread`, for kernels or sandboxes without
// io_uring). Both share the same request semantics, retry rules and tests.
//
// Usage, from the compute loop that owns the engine (one thread):
//   int f = engine->open_file(path, drive);
//   AlignedSpan s = engine->span(f, offset, length);
//   buf = aligned buffer of s.bytes, aligned to engine->file(f).mem_align
//   engine->submit({f, offset, length, buf, tag});
//   ... engine->wait(done, 1); for (auto& c : done) use(c.tag, c.payload) ...
//
// Not thread-safe: one owner thread calls every method. Requests of one drive
// beyond its queue depth wait in a per-drive queue (not yet started), where
// cancel() can still remove them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace deltafin::store {

// A read that failed after its retries; the message names file and offset.
class ReadError : public Error {
 public:
  ReadError(const std::string& msg, uint64_t tag) : Error(msg), tag_(tag) {}
  uint64_t tag() const { return tag_; }  // the failed request's tag

 private:
  uint64_t tag_;
};

enum class IoKind { Uring, Pread };

// "uring" | "io_uring" | "pread"; throws Error naming `what` otherwise.
IoKind parse_io_kind(std::string_view s, std::string_view what = "--io");
const char* io_kind_name(IoKind kind);

// One raw read as the kernel answered it, for the fault-injection hook.
struct RawRead {
  int file;            // file id
  uint64_t offset;     // bytes, aligned
  uint64_t length;     // bytes asked for
  int64_t result;      // bytes read (>= 0) or -errno
};

struct IoOptions {
  int queue_depth = 16;   // reads in flight per drive, >= 1
  int retries = 2;        // extra attempts after an error or checksum mismatch
  int pread_threads = 0;  // pread engine only: workers (0: queue_depth x 4, at most 64)
  bool direct = true;     // O_DIRECT; false only for filesystems without it
  // Test hook (fault injection): sees every raw read result and returns the
  // result the engine acts on (e.g. fewer bytes, or -EIO). Called from I/O
  // worker threads in the pread engine, so it must be thread-safe.
  std::function<int64_t(const RawRead&)> fault;
};

// A registered file.
struct FileInfo {
  std::string path;
  int drive = 0;
  uint64_t size = 0;           // bytes, at open time
  uint32_t mem_align = 4096;   // destination buffers are aligned to this
  uint32_t offset_align = 4096;  // file offsets and lengths of raw reads
};

// The aligned range read for a request: [offset, offset + bytes) of the file,
// whose payload starts `skip` bytes into the destination buffer.
struct AlignedSpan {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t skip = 0;
};
// REQUIRES: align is a power of two.
AlignedSpan aligned_span(uint64_t offset, uint64_t length, uint64_t align);

struct ReadRequest {
  int file = -1;          // from open_file()
  uint64_t offset = 0;    // payload byte range [offset, offset + length) of the file
  uint64_t length = 0;    // > 0
  // REQUIRES: aligned to file(file).mem_align, with room for
  // span(file, offset, length).bytes; valid until the request's completion
  // is returned, it is cancelled, or the engine is destroyed.
  uint8_t* dest = nullptr;
  uint64_t tag = 0;       // the caller's id; unique among outstanding requests
  bool verify = false;    // check xxh64(payload) == checksum (--verify-reads)
  uint64_t checksum = 0;
  // A demand read (compute waits for it): starts before every queued
  // request of its drive that is not urgent (prefetches), after the urgent
  // ones queued before it.
  bool urgent = false;
};

struct Completion {
  uint64_t tag = 0;
  uint8_t* payload = nullptr;  // dest + span.skip: the requested bytes
  uint64_t length = 0;
  int drive = 0;
  int attempts = 1;            // > 1 when a read was retried
  double latency_s = 0;        // submit() to the moment the engine saw it land
};

class IoEngine {
 public:
  virtual ~IoEngine();  // closes the files (implementations drain reads first)

  virtual IoKind kind() const = 0;
  const IoOptions& options() const { return opts_; }

  // Opens `path` read-only (O_DIRECT unless options().direct is false) and
  // registers it as belonging to `drive` (>= 0). Returns its file id.
  // Throws Error naming the file when it cannot be opened.
  virtual int open_file(const std::string& path, int drive = 0) = 0;
  const FileInfo& file(int id) const { return files_.at(static_cast<size_t>(id)); }
  int file_count() const { return static_cast<int>(files_.size()); }
  AlignedSpan span(int file, uint64_t offset, uint64_t length) const;

  // Queues a read. Requests start in submission order per drive, at most
  // queue_depth in flight per drive.
  virtual void submit(const ReadRequest& r) = 0;

  // Appends the completions that have landed, without blocking; returns how
  // many were appended. Throws ReadError (naming file, offset and cause) for a
  // request that failed after its retries: a short file, EIO, a checksum
  // mismatch. A failed request is no longer outstanding; completions seen in
  // the same call are kept for the next call, none is lost.
  virtual size_t poll(std::vector<Completion>& out) = 0;

  // Like poll(), but blocks until at least min(min_count, outstanding())
  // completions have been appended.
  virtual size_t wait(std::vector<Completion>& out, size_t min_count = 1) = 0;

  // Removes a request that has not started. Returns true if it was removed:
  // it is never read and no completion comes for it. False if it has already
  // started (its completion will come) or is unknown.
  virtual bool cancel(uint64_t tag) = 0;

  // Makes a request that has not started urgent (see ReadRequest::urgent).
  // Returns false if it has started or is unknown.
  virtual bool promote(uint64_t tag) = 0;

  // Requests submitted and neither returned by poll()/wait() nor cancelled.
  virtual size_t outstanding() const = 0;

  // Payload bytes of the drive's outstanding requests (queued + in flight):
  // what the placement of mirrored reads weighs (see drive.h).
  virtual uint64_t queued_bytes(int drive) const = 0;

 protected:
  explicit IoEngine(IoOptions opts);
  // Opens and stats the file, filling FileInfo; returns the fd.
  int open_and_register(const std::string& path, int drive);
  void check_request(const ReadRequest& r) const;

  IoOptions opts_;
  std::vector<FileInfo> files_;
  std::vector<int> fds_;
};

// Throws Error when io_uring cannot be set up (with a hint to use --io pread).
std::unique_ptr<IoEngine> make_io_engine(IoKind kind, const IoOptions& opts = {});

}  // namespace deltafin::store
