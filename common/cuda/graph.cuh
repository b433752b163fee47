// A training step recorded once as a CUDA Graph and replayed: one launch instead of hundreds.
// Capture records the work queued on a stream (kernels, copies, memsets) without running it;
// replaying runs the same work with the same pointers and launch arguments. What changes from
// step to step must therefore be read from memory at run time: the batch from pinned staging
// buffers, the learning rate and step count from device memory (train/optimizer.h).
#pragma once
#include <cuda_runtime.h>

#include "cuda/check.cuh"

namespace gpt::cuda {

// [stage switch kCaptureStep]
class StepGraph {
  public:
    StepGraph() = default;
    ~StepGraph() { reset(); }
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    bool ready() const { return exec_ != nullptr; }

    // Records what `enqueue()` queues on `stream` (nothing runs yet). If it throws, the capture
    // is ended and thrown away, so that the stream can be used again.
    template <class F>
    void capture(cudaStream_t stream, F&& enqueue) {
        reset();
        // ThreadLocal: only this thread's unsafe calls (a synchronisation, say) end the capture.
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        cudaGraph_t graph = nullptr;
        try {
            enqueue();
        } catch (...) {
            cudaStreamEndCapture(stream, &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();  // the failed capture's error must not be reported by a later call
            throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        const cudaError_t err = cudaGraphInstantiate(&exec_, graph, 0);
        cudaGraphDestroy(graph);
        CUDA_CHECK(err);
    }

    void replay(cudaStream_t stream) { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

    void reset() {
        if (exec_) cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
    }

  private:
    cudaGraphExec_t exec_ = nullptr;
};
// [end stage switch kCaptureStep]

}  // namespace gpt::cuda
