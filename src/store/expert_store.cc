#include "store/expert_store.h"

#include <algorithm>

#include "store/checksum.h"
#include "store/io_op.h"
#include "util/error.h"

namespace deltafin::store {

namespace {
// The store's reads carry tags with the top bit set (debugging aid: a
// completion without it came from a read submitted around the store).
constexpr uint64_t kStoreTagBit = 1ull << 63;
}  // namespace

ExpertStore::ExpertStore(const std::string& store_dir, IoEngine& engine, StoreOptions opts)
    : manifest_(Manifest::load(store_dir)),
      engine_(engine),
      opts_(std::move(opts)),
      drives_(opts_.drives.empty() ? manifest_.drives : opts_.drives, opts_.missing) {
  if (!opts_.drives.empty() && opts_.drives.size() != manifest_.drives.size())
    fail("--drives gives {} directories but the store in {} was packed on {}; give them in the "
         "order pack used", opts_.drives.size(), store_dir, manifest_.drives.size());
  drives_.load_profiles();
  align_ = std::max<size_t>(manifest_.alignment, 64);
  for (const auto& f : manifest_.files) {
    if (!drives_.available(f.drive)) {
      file_ids_.push_back(-1);
      continue;
    }
    const std::string path = drives_.dir(f.drive) + "/" + f.name;
    int id = engine_.open_file(path, f.drive);
    const FileInfo& info = engine_.file(id);
    if (info.size < f.bytes)
      fail("{} is {} bytes but the store manifest says {}: it is truncated; re-run deltafin pack",
           path, info.size, f.bytes);
    align_ = std::max<size_t>(align_, info.mem_align);
    align_ = std::max<size_t>(align_, info.offset_align);
    file_ids_.push_back(id);
  }
  bytes_read_.assign(manifest_.drives.size(), 0);
}

uint64_t ExpertStore::buffer_bytes(const Record& r) const {
  return (r.length + align_ - 1) / align_ * align_;
}

ReadRequest ExpertStore::part_request(const Record& r, int copy, uint64_t off, uint64_t len,
                                      uint8_t* dest, uint64_t io_tag) const {
  const RecordCopy& c = r.copies[copy];
  ReadRequest q;
  q.file = file_ids_[c.file];
  q.offset = c.offset + off;
  q.length = len;
  q.dest = dest + off;
  q.tag = io_tag;
  // A whole-record read is verified by the engine (with its retries).
  q.verify = opts_.verify_reads && off == 0 && len == r.length;
  q.checksum = r.checksum;
  return q;
}

const Record& ExpertStore::request(int layer, int expert, uint8_t* dest, uint64_t tag, bool urgent) {
  const Record* r = manifest_.find(layer, expert);
  if (!r)
    fail("the store has no record for layer {} expert {}; the model and the store do not match "
         "(re-pack the store from this checkpoint)", layer, expert);
  DF_CHECK(reinterpret_cast<uintptr_t>(dest) % align_ == 0);
  DF_CHECK(!pending_.count(tag));
  std::vector<int> drive_of_copy;
  for (const auto& c : r->copies) drive_of_copy.push_back(manifest_.files[c.file].drive);
  ReadPlan plan = drives_.plan(r->length, drive_of_copy, engine_, opts_.split_reads ? 0.10 : 1.0);
  Pending p;
  p.record = r;
  p.dest = dest;
  p.start_ns = detail::now_ns();
  const uint64_t piece = opts_.chunk_bytes == 0 ? 0 : std::max<uint64_t>(opts_.chunk_bytes / align_, 1) * align_;
  for (const auto& part : plan.parts) {
    const uint64_t step = piece == 0 ? part.length : piece;
    for (uint64_t off = 0; off < part.length; off += step) {
      uint64_t io_tag = kStoreTagBit | next_io_tag_++;
      p.parts.push_back({io_tag, part.mirror,
                         part_request(*r, part.mirror, part.offset + off, std::min(step, part.length - off),
                                      dest, io_tag)});
    }
  }
  for (auto& part : p.parts) {
    part.req.urgent = urgent;
    engine_.submit(part.req);
    io_to_tag_[part.io_tag] = tag;
  }
  pending_.emplace(tag, std::move(p));
  return *r;
}

void ExpertStore::resolve(uint64_t tag, Pending& p) {
  if (++p.resolved < static_cast<int>(p.parts.size())) return;
  if (!p.error.empty()) {
    failed_.emplace_back(p.error, tag);
    pending_.erase(tag);
    return;
  }
  const Record& r = *p.record;
  if (opts_.verify_reads && p.parts.size() > 1 && xxh64(p.dest, r.length) != r.checksum) {
    // A split read does not match: read the record whole from the first
    // part's mirror, verified by the engine, whose retries and error apply.
    const int copy = p.parts[0].copy;
    const bool urgent = p.parts[0].req.urgent;
    uint64_t io_tag = kStoreTagBit | next_io_tag_++;
    p.parts = {{io_tag, copy, part_request(r, copy, 0, r.length, p.dest, io_tag)}};
    p.parts[0].req.urgent = urgent;
    p.resolved = 0;
    engine_.submit(p.parts[0].req);
    io_to_tag_[io_tag] = tag;
    return;
  }
  RecordCompletion c;
  c.tag = tag;
  c.record = p.record;
  c.bytes = p.dest;
  c.parts = static_cast<int>(p.parts.size());
  c.attempts = p.attempts;
  c.latency_s = static_cast<double>(detail::now_ns() - p.start_ns) * 1e-9;
  ready_.push_back(c);
  pending_.erase(tag);
}

void ExpertStore::step(bool block) {
  scratch_.clear();
  try {
    if (block)
      engine_.wait(scratch_, 1);
    else
      engine_.poll(scratch_);
  } catch (const ReadError& e) {
    auto it = io_to_tag_.find(e.tag());
    if (it == io_to_tag_.end()) throw;  // not one of ours
    const uint64_t tag = it->second;
    io_to_tag_.erase(it);
    Pending& p = pending_.at(tag);
    if (p.error.empty()) p.error = e.what();
    resolve(tag, p);
  }
  for (const auto& c : scratch_) {
    auto it = io_to_tag_.find(c.tag);
    DF_CHECK(it != io_to_tag_.end());  // a read submitted to this engine around the store
    const uint64_t tag = it->second;
    io_to_tag_.erase(it);
    bytes_read_[c.drive] += c.length;
    Pending& p = pending_.at(tag);
    p.attempts += c.attempts;
    resolve(tag, p);
  }
}

size_t ExpertStore::deliver(std::vector<RecordCompletion>& out) {
  if (!failed_.empty()) {
    ReadError e = std::move(failed_.front());
    failed_.pop_front();
    throw e;
  }
  size_t n = ready_.size();
  for (auto& c : ready_) out.push_back(c);
  ready_.clear();
  return n;
}

size_t ExpertStore::poll(std::vector<RecordCompletion>& out) {
  step(false);
  return deliver(out);
}

size_t ExpertStore::wait(std::vector<RecordCompletion>& out, size_t min_count) {
  const size_t need = std::min(min_count, outstanding());
  while (failed_.empty() && ready_.size() < need) step(true);
  return deliver(out);
}

bool ExpertStore::promote(uint64_t tag) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return false;
  for (auto& part : it->second.parts) {
    part.req.urgent = true;  // also for a re-read after a failed joined checksum
    engine_.promote(part.io_tag);
  }
  return true;
}

bool ExpertStore::cancel(uint64_t tag) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return false;
  Pending& p = it->second;
  if (p.resolved > 0) return false;
  std::vector<const Part*> cancelled;
  for (const auto& part : p.parts) {
    if (!engine_.cancel(part.io_tag)) break;
    cancelled.push_back(&part);
  }
  if (cancelled.size() == p.parts.size()) {
    for (const auto& part : p.parts) io_to_tag_.erase(part.io_tag);
    pending_.erase(it);
    return true;
  }
  // One part has started: the record will be read after all.
  for (const Part* part : cancelled) engine_.submit(part->req);
  return false;
}

}  // namespace deltafin::store
