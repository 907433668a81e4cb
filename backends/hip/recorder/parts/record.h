// ---- the record of one launch: its code image, its prologue, the launch, its epilogue --------------
//
// The engine's record of a launch (mneme/core/recorder/native/record.h) around the HIP runtime's
// launch, without in-application timing (not built for HIP yet: the recorded launch runs once, untimed).

// The image file of a code image, written on first use (mu() held); "" when unknown or unwritable.
std::string image_file(Image *img) {
    if (!img) return "";
    size_t index = 0;
    {
        std::lock_guard<std::mutex> lock(registry().mu);
        auto &all = registry().images;
        index = std::find(all.begin(), all.end(), img) - all.begin();
    }
    return write_image_once(*img, index, img->data.data(), img->data.size());
}

struct Launch {
    hip_dim3 grid, block;
    unsigned shared;
    hipStream_t stream;
    bool cooperative = false;  // hipLaunchCooperativeKernel: every block resident at once
};

// hipModuleLaunchKernel's `extra`: a packed argument buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER,
// _SIZE, _END are 1, 2, 3 in hip_runtime_api.h).
const uintptr_t PARAM_BUFFER_POINTER = 1, PARAM_BUFFER_SIZE = 2, PARAM_END = 3;

// The argument buffer of a launch, laid out as the code object's metadata says: from the array
// of argument pointers (`params`), else from `extra`'s packed buffer; false when the kernel's
// arguments are not known.
bool pack_args(const Kernel &k, void **params, void **extra, std::string &args,
               std::vector<std::pair<size_t, size_t>> &layout) {
    if (!k.image) return false;
    auto it = k.image->layouts.find(k.name);
    if (it == k.image->layouts.end()) return false;
    layout = it->second;
    size_t size = 0;
    for (auto &p : layout) size = std::max(size, p.first + p.second);
    args.assign(size, '\0');
    if (layout.empty()) return true;
    if (params) {
        for (size_t i = 0; i < layout.size(); ++i) memcpy(&args[layout[i].first], params[i], layout[i].second);
        return true;
    }
    const void *buffer = nullptr;
    const size_t *given = nullptr;
    for (size_t i = 0; extra && reinterpret_cast<uintptr_t>(extra[i]) != PARAM_END && i < 64; i += 2) {
        if (reinterpret_cast<uintptr_t>(extra[i]) == PARAM_BUFFER_POINTER) buffer = extra[i + 1];
        if (reinterpret_cast<uintptr_t>(extra[i]) == PARAM_BUFFER_SIZE) given = static_cast<const size_t *>(extra[i + 1]);
    }
    if (!buffer || !given) return false;
    memcpy(&args[0], buffer, std::min(size, *given));
    return *given >= size;
}

// Whether MNEME_RECORD_KERNEL selects a kernel, decided once per name.
bool selected(const std::string &name) {
    static std::mutex *m = new std::mutex();
    static auto *known = new std::unordered_map<std::string, bool>();
    std::lock_guard<std::mutex> lock(*m);
    auto it = known->find(name);
    if (it != known->end()) return it->second;
    return (*known)[name] = !name.empty() && std::regex_search(name, config().kernel);
}

const char *error_name(int status) {
    static auto name = runtime_fn<const char *(*)(hipError_t)>("hipGetErrorName");
    const char *text = name ? name((hipError_t)status) : nullptr;
    return text ? text : "an unknown HIP error";
}

// Decide whether to record this launch; when yes, the engine runs it between prologue and epilogue
// captures (record.h). Selection and argument packing are the HIP API's.
template <typename Run>
hipError_t record_launch(const Kernel *k, const Launch &l, void **params, void **extra, Run run) {
    const Config &c = config();
    if (disabled || in_recorder || c.dir.empty() || !k || !selected(k->name)) return run();
    RecordingScope scope;
    const std::string &name = k->name;
    LaunchRecord r;
    if (!pack_args(*k, params, extra, r.args, r.layout)) {
        warn_once("unknown arguments",
                  "the arguments of %s are not known (no AMDGPU metadata for it in a code image the recorder "
                  "could read, e.g. a compressed offload bundle); its launches are not recorded (later ones are "
                  "not reported)", name.c_str());
        count_unrecorded(name, "its arguments are not known (no AMDGPU metadata for it in a readable code image)");
        return run();
    }
    std::lock_guard<std::mutex> lock(mu());
    if (disabled) return run();
    KernelCounts &kc = counts()[name];
    unsigned grid[3] = {l.grid.x, l.grid.y, l.grid.z}, block[3] = {l.block.x, l.block.y, l.block.z};
    uint64_t h = instance_key(grid, block, l.shared, r.args);
    if (admit(kc, h, r.index) != Admission::Record) return run();
    r.format = "mneme-hip-raw";
    r.kernel = name;
    r.key = h;
    for (int i = 0; i < 3; ++i) r.grid[i] = grid[i], r.block[i] = block[i];
    r.shared = l.shared;
    r.cooperative = l.cooperative;
    r.stream = l.stream;
    r.regions = live_regions();
    LaunchHooks<hipError_t> hooks;
    hooks.run = run;
    hooks.launch = run;  // untimed: in-application timing is not built for HIP yet
    hooks.error_name = error_name;
    // The image's device globals, captured beside the allocations (the registered ones get their
    // device address now: the runtime resolves registered variables lazily).
    hooks.describe = [&](LaunchRecord &rec) {
        if (!k->image) return;
        static auto symbol_address = runtime_fn<hipError_t (*)(void **, const void *)>("hipGetSymbolAddress");
        {
            std::lock_guard<std::mutex> reg(registry().mu);
            for (auto &g : k->image->globals) {
                if (!g.second.addr && g.second.host && symbol_address) {
                    void *addr = nullptr;
                    if (symbol_address(&addr, g.second.host) == hipSuccess) g.second.addr = reinterpret_cast<uint64_t>(addr);
                }
                if (g.second.addr && g.second.size) rec.globals.push_back(GlobalVar{g.first, g.second.addr, g.second.size});
            }
        }
        rec.image = image_file(k->image);
        if (!rec.image.empty()) rec.image_kind = k->image->kind;
    };
    return record_admitted(kc, r, hooks);
}
