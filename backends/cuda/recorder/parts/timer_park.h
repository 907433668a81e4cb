// ---- the kernel timer parked between timings ---------------------------------------------------------

// CUPTI's kernel records, once on, cost every kernel the process runs: on an H100 a loop of
// 32-node CUDA graph launches ran 25% slower after its one recorded launch (8.4 us per graph launch,
// bench_recorder's graph figure at 8e4707d), with nothing left to time. So the records are turned off
// ("parked") once MNEME_RECORD_TIMER_PARK launches in a row went untimed, and turned on again by a
// launch the recorder is about to time: before mu() is taken, because CUPTI's enabling may call the
// driver, whose entry points here take mu(). A launch that will be timed holds a claim from then
// until its timing is done, so no other thread parks the records under it. Where a record does not
// come after the records were turned on again, parking stops for the rest of the process (the records
// stay on) and counts-<pid>.json says so.
struct TimerPark {
    std::mutex mu;                        // park and resume; never taken with mu() held
    std::atomic<bool> active{false};      // the kernel timer runs and parking is allowed
    std::atomic<bool> parked{false};      // the records are off now
    std::atomic<bool> broken{false};      // a record did not come after a resume: never parked again
    std::atomic<long> untimed{0};         // launches since the last timed one
    std::atomic<long> claims{0};          // launches about to be timed
    std::atomic<long> parks{0}, resumes{0};
};

TimerPark &timer_park() {
    static auto *p = new TimerPark();
    return *p;
}

// Every launch the recorder sees (outside mu()): parks the records after enough untimed ones.
void park_tick() {
#ifdef MNEME_CUPTI
    TimerPark &p = timer_park();
    if (!p.active.load(std::memory_order_relaxed) || p.parked.load(std::memory_order_relaxed)) return;
    const long after = config().timer_park;
    if (after <= 0 || p.untimed.fetch_add(1, std::memory_order_relaxed) + 1 < after) return;
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.parked || p.broken || p.claims.load() > 0 || p.untimed.load() < after) return;
    if (mct_enable(MCT_OFF) == 0) {
        p.parked = true;
        p.parks++;
    }
#endif
}

// Whether a launch of `kernel` with instance key `key` is one the recorder would time: a new
// instance it would record, or a recorded one with timings left to take (mu() held).
bool would_time(const std::string &kernel, uint64_t key) {
    const Config &c = config();
    if (c.timed < 0) return false;
    static const KernelCounts unseen;
    auto it = counts().find(kernel);
    const KernelCounts &kc = it == counts().end() ? unseen : it->second;
    switch (peek_admission(kc, key)) {
        case Admission::Record: return true;
        case Admission::Recorded: {
            auto t = kc.timed.find(key);
            return t == kc.timed.end() || t->second <= c.timed;
        }
        default: return false;
    }
}

// Held by a launch the recorder will time, from before mu() is taken until its timing is done:
// the records are on for it (turned on again here when parked) and stay on while it is held.
class TimingClaim {
  public:
    explicit TimingClaim(bool wanted) {
#ifdef MNEME_CUPTI
        TimerPark &p = timer_park();
        if (!wanted || !p.active.load()) return;
        held_ = true;
        p.claims.fetch_add(1);
        p.untimed.store(0);
        if (!p.parked.load()) return;
        std::lock_guard<std::mutex> lock(p.mu);
        if (p.parked && mct_enable(MCT_WINDOWS) == 0) {
            p.parked = false;
            p.resumes++;
        }
#else
        (void)wanted;
#endif
    }
    ~TimingClaim() {
        if (held_) timer_park().claims.fetch_sub(1);
    }
    TimingClaim(const TimingClaim &) = delete;
    TimingClaim &operator=(const TimingClaim &) = delete;

  private:
    bool held_ = false;
};

// Whether the launch of `kernel` with instance `key` will be timed by the kernel timer, peeked
// under mu() before the launch takes it for good (outside mu(): it may turn the records on).
bool timer_wants(const std::string &kernel, uint64_t key) {
    if (!timer_park().active.load(std::memory_order_relaxed)) return false;
    std::lock_guard<std::mutex> lock(mu());
    return would_time(kernel, key);
}
