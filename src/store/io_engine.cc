#include "store/io_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "store/checksum.h"
#include "store/io_op.h"
#include "util/error.h"

namespace deltafin::store {

IoKind parse_io_kind(std::string_view s, std::string_view what) {
  if (s == "uring" || s == "io_uring") return IoKind::Uring;
  if (s == "pread") return IoKind::Pread;
  fail("{}: unknown I/O engine '{}'; use uring or pread", what, std::string(s));
}

const char* io_kind_name(IoKind kind) { return kind == IoKind::Uring ? "uring" : "pread"; }

AlignedSpan aligned_span(uint64_t offset, uint64_t length, uint64_t align) {
  DF_CHECK(align && (align & (align - 1)) == 0);
  AlignedSpan s;
  s.offset = offset & ~(align - 1);
  s.skip = offset - s.offset;
  s.bytes = (s.skip + length + align - 1) & ~(align - 1);
  return s;
}

IoEngine::IoEngine(IoOptions opts) : opts_(std::move(opts)) {
  if (opts_.queue_depth < 1) fail("queue depth {} is invalid; use 1 or more", opts_.queue_depth);
  if (opts_.retries < 0) fail("retries {} is invalid; use 0 or more", opts_.retries);
}

IoEngine::~IoEngine() {
  for (int fd : fds_) ::close(fd);
}

AlignedSpan IoEngine::span(int f, uint64_t offset, uint64_t length) const {
  return aligned_span(offset, length, file(f).offset_align);
}

int IoEngine::open_and_register(const std::string& path, int drive) {
  DF_CHECK(drive >= 0);
  int flags = O_RDONLY | O_CLOEXEC | (opts_.direct ? O_DIRECT : 0);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int e = errno;
    if (e == EINVAL && opts_.direct)
      fail("{}: its filesystem does not support direct I/O (O_DIRECT); keep the store on "
           "ext4/xfs or similar", path);
    fail("cannot open {}: {}; check that the drive is mounted and the store is complete",
         path, std::strerror(e));
  }
  FileInfo info;
  info.path = path;
  info.drive = drive;
  struct statx stx {};
  unsigned mask = STATX_SIZE | STATX_TYPE;
#ifdef STATX_DIOALIGN
  mask |= STATX_DIOALIGN;
#endif
  if (::statx(fd, "", AT_EMPTY_PATH, mask, &stx) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path, std::strerror(e));
  }
  if (!S_ISREG(stx.stx_mode)) {
    ::close(fd);
    fail("{} is not a regular file; expected a store data file", path);
  }
  info.size = stx.stx_size;
#ifdef STATX_DIOALIGN
  // Fall back to 4096 (the largest common logical block) when the kernel
  // does not say.
  if ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align && stx.stx_dio_mem_align) {
    info.offset_align = stx.stx_dio_offset_align;
    info.mem_align = stx.stx_dio_mem_align;
  }
#endif
  if (!opts_.direct) info.offset_align = info.mem_align = 1;
  files_.push_back(std::move(info));
  fds_.push_back(fd);
  return static_cast<int>(files_.size()) - 1;
}

void IoEngine::check_request(const ReadRequest& r) const {
  DF_CHECK(r.file >= 0 && r.file < file_count());
  DF_CHECK(r.length > 0);
  DF_CHECK(r.dest != nullptr);
  DF_CHECK(reinterpret_cast<uintptr_t>(r.dest) % file(r.file).mem_align == 0);
}

std::unique_ptr<IoEngine> make_io_engine(IoKind kind, const IoOptions& opts) {
  return kind == IoKind::Uring ? detail::make_uring_engine(opts)
                               : detail::make_pread_engine(opts);
}

namespace detail {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A raw read's length is a 32-bit field in io_uring; large spans continue in
// further reads of at most this many bytes.
uint64_t ReadOp::next_length(uint64_t max_chunk) const {
  return std::min(span.bytes - done, max_chunk);
}

ReadOp make_op(const ReadRequest& r, const FileInfo& f) {
  ReadOp op;
  op.req = r;
  op.span = aligned_span(r.offset, r.length, f.offset_align);
  op.drive = f.drive;
  op.submit_ns = now_ns();
  return op;
}

Step advance(ReadOp& op, int64_t result, const FileInfo& f, const IoOptions& opts,
             std::string* error) {
  const uint64_t need = op.span.skip + op.req.length;  // bytes of span that must land
  auto retry_or_fail = [&](const std::string& why) {
    ++op.errors;
    if (op.errors > opts.retries) {
      *error = fmt::format("reading {} at offset {} (length {}) failed after {} attempts: {}",
                           f.path, op.req.offset, op.req.length, op.errors, why);
      return Step::Failed;
    }
    ++op.attempts;
    return Step::Again;
  };
  if (result == -EAGAIN || result == -EINTR) return Step::Again;  // not an error
  if (result < 0) {
    int e = static_cast<int>(-result);
    return retry_or_fail(fmt::format("{}; the drive may be failing: check dmesg, or use a mirror",
                                     std::strerror(e)));
  }
  const uint64_t before = op.done;
  op.done += static_cast<uint64_t>(result);
  if (op.done >= need) {
    if (op.req.verify) {
      uint64_t got = xxh64(op.req.dest + op.span.skip, op.req.length);
      if (got != op.req.checksum) {
        op.done = 0;  // read it all again
        return retry_or_fail(fmt::format(
            "checksum mismatch (expected {:016x}, read {:016x}); the record is corrupt: run "
            "deltafin verify and re-pack",
            op.req.checksum, got));
      }
    }
    return Step::Done;
  }
  // End of file before the payload ends: nothing more will come.
  if (result == 0 || op.span.offset + op.done >= f.size) {
    *error = fmt::format("{} ends at byte {} but a record at offset {} (length {}) reaches byte {}; "
                         "the file is truncated: re-run deltafin pack",
                         f.path, op.span.offset + op.done, op.req.offset, op.req.length,
                         op.req.offset + op.req.length);
    return Step::Failed;
  }
  // Short read: direct I/O continues at an aligned offset.
  op.done &= ~(uint64_t{f.offset_align} - 1);
  if (op.done <= before) {
    op.done = before;
    return retry_or_fail("short reads without progress");
  }
  return Step::Again;
}

Completion complete(const ReadOp& op) {
  Completion c;
  c.tag = op.req.tag;
  c.payload = op.req.dest + op.span.skip;
  c.length = op.req.length;
  c.drive = op.drive;
  c.attempts = op.attempts;
  c.latency_s = static_cast<double>(now_ns() - op.submit_ns) * 1e-9;
  return c;
}

void DriveQueues::grow(int drive) {
  size_t n = static_cast<size_t>(drive) + 1;
  if (wait_.size() < n) {
    wait_.resize(n);
    flight_.resize(n, 0);
    bytes_.resize(n, 0);
  }
}

void DriveQueues::push(ReadOp op) {
  grow(op.drive);
  bytes_[op.drive] += op.req.length;
  auto& q = wait_[op.drive];
  if (op.req.urgent) {
    auto it = std::find_if(q.begin(), q.end(), [](const ReadOp& o) { return !o.req.urgent; });
    q.insert(it, std::move(op));
  } else {
    q.push_back(std::move(op));
  }
  ++waiting_;
}

bool DriveQueues::promote(uint64_t tag) {
  for (auto& q : wait_) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->req.tag != tag) continue;
      if (it->req.urgent) return true;
      ReadOp op = std::move(*it);
      q.erase(it);
      op.req.urgent = true;
      auto at = std::find_if(q.begin(), q.end(), [](const ReadOp& o) { return !o.req.urgent; });
      q.insert(at, std::move(op));
      return true;
    }
  }
  return false;
}

bool DriveQueues::pop_startable(ReadOp* op) {
  size_t n = wait_.size();
  for (size_t k = 0; k < n; ++k) {
    size_t d = (next_drive_ + k) % n;
    if (!wait_[d].empty() && flight_[d] < qd_) {
      *op = std::move(wait_[d].front());
      wait_[d].pop_front();
      --waiting_;
      ++flight_[d];
      ++in_flight_total_;
      next_drive_ = (d + 1) % n;
      return true;
    }
  }
  return false;
}

void DriveQueues::finished(int drive) {
  DF_CHECK(flight_[drive] > 0);
  --flight_[drive];
  --in_flight_total_;
}

bool DriveQueues::cancel(uint64_t tag, ReadOp* removed) {
  for (auto& q : wait_) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->req.tag == tag) {
        *removed = std::move(*it);
        q.erase(it);
        --waiting_;
        bytes_[removed->drive] -= removed->req.length;
        return true;
      }
    }
  }
  return false;
}

uint64_t DriveQueues::queued_bytes(int drive) const {
  return drive >= 0 && static_cast<size_t>(drive) < bytes_.size() ? bytes_[drive] : 0;
}

void DriveQueues::add_bytes(int drive, int64_t delta) {
  grow(drive);
  bytes_[drive] = static_cast<uint64_t>(static_cast<int64_t>(bytes_[drive]) + delta);
}

void DriveQueues::clear() {
  for (size_t d = 0; d < wait_.size(); ++d) {
    for (auto& op : wait_[d]) bytes_[d] -= op.req.length;
    waiting_ -= wait_[d].size();
    wait_[d].clear();
  }
}

}  // namespace detail
}  // namespace deltafin::store
