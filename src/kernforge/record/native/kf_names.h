/* kernforge driver interposer: the driver functions the interposer exports as flushing thunks
 * (kf_thunk.c), so that a program linked against libcuda (-lcuda), binding them by symbol,
 * flushes held launches (kf_defer.c) before any of them runs.
 *
 * The list is CUDA 13.0's driver API (cuda.h read with and without
 * CUDA_API_PER_THREAD_DEFAULT_STREAM: the names libcuda exports) and older ABI versions of its
 * copies, memsets, contexts, events, streams and launches, less the harmless queries
 * (kf_harmless in kf_thunk.c) and the functions the interposer wraps itself (kf_hooks.c,
 * kf_track.c, kf_ctx.c). A name the driver lacks resolves to a function that returns an error.
 */
#ifndef KF_NAMES_H
#define KF_NAMES_H
#define KF_FLUSHING(X) \
    X(cuArray3DCreate_v2) X(cuArray3DGetDescriptor_v2) X(cuArrayCreate_v2) X(cuArrayDestroy) \
    X(cuArrayGetDescriptor_v2) X(cuArrayGetMemoryRequirements) X(cuArrayGetPlane) \
    X(cuArrayGetSparseProperties) X(cuCheckpointProcessCheckpoint) \
    X(cuCheckpointProcessGetRestoreThreadId) X(cuCheckpointProcessGetState) \
    X(cuCheckpointProcessLock) X(cuCheckpointProcessRestore) X(cuCheckpointProcessUnlock) \
    X(cuCoredumpGetAttribute) X(cuCoredumpGetAttributeGlobal) X(cuCoredumpSetAttribute) \
    X(cuCoredumpSetAttributeGlobal) X(cuCtxAttach) X(cuCtxCreate) X(cuCtxCreate_v2) \
    X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDetach) \
    X(cuCtxDisablePeerAccess) X(cuCtxEnablePeerAccess) X(cuCtxFromGreenCtx) X(cuCtxPopCurrent) \
    X(cuCtxPopCurrent_v2) X(cuCtxRecordEvent) X(cuCtxResetPersistingL2Cache) \
    X(cuCtxSetCacheConfig) X(cuCtxSetFlags) X(cuCtxSetLimit) X(cuCtxSetSharedMemConfig) \
    X(cuCtxSynchronize) X(cuCtxSynchronize_v2) X(cuCtxWaitEvent) X(cuDestroyExternalMemory) \
    X(cuDestroyExternalSemaphore) X(cuDevResourceGenerateDesc) X(cuDevSmResourceSplitByCount) \
    X(cuDeviceGraphMemTrim) \
    X(cuDevicePrimaryCtxSetFlags) \
    X(cuDevicePrimaryCtxSetFlags_v2) X(cuDeviceRegisterAsyncNotification) \
    X(cuDeviceSetGraphMemAttribute) X(cuDeviceSetMemPool) X(cuDeviceUnregisterAsyncNotification) \
    X(cuEventDestroy) X(cuEventDestroy_v2) X(cuEventQuery) X(cuEventRecord) \
    X(cuEventRecordWithFlags) X(cuEventRecordWithFlags_ptsz) X(cuEventRecord_ptsz) \
    X(cuEventSynchronize) X(cuExternalMemoryGetMappedBuffer) \
    X(cuExternalMemoryGetMappedMipmappedArray) X(cuFlushGPUDirectRDMAWrites) \
    X(cuFuncSetBlockShape) X(cuFuncSetSharedSize) X(cuGetProcAddress_v2_ptsz) \
    X(cuGraphAddBatchMemOpNode) X(cuGraphAddChildGraphNode) X(cuGraphAddDependencies_v2) \
    X(cuGraphAddEmptyNode) X(cuGraphAddEventRecordNode) X(cuGraphAddEventWaitNode) \
    X(cuGraphAddExternalSemaphoresSignalNode) X(cuGraphAddExternalSemaphoresWaitNode) \
    X(cuGraphAddHostNode) X(cuGraphAddKernelNode) X(cuGraphAddKernelNode_v2) \
    X(cuGraphAddMemAllocNode) X(cuGraphAddMemFreeNode) X(cuGraphAddMemcpyNode) \
    X(cuGraphAddMemsetNode) X(cuGraphAddNode_v2) X(cuGraphBatchMemOpNodeGetParams) \
    X(cuGraphBatchMemOpNodeSetParams) X(cuGraphChildGraphNodeGetGraph) X(cuGraphClone) \
    X(cuGraphConditionalHandleCreate) X(cuGraphCreate) X(cuGraphDebugDotPrint) X(cuGraphDestroy) \
    X(cuGraphDestroyNode) X(cuGraphEventRecordNodeGetEvent) X(cuGraphEventRecordNodeSetEvent) \
    X(cuGraphEventWaitNodeGetEvent) X(cuGraphEventWaitNodeSetEvent) \
    X(cuGraphExecBatchMemOpNodeSetParams) X(cuGraphExecChildGraphNodeSetParams) \
    X(cuGraphExecDestroy) X(cuGraphExecEventRecordNodeSetEvent) \
    X(cuGraphExecEventWaitNodeSetEvent) X(cuGraphExecExternalSemaphoresSignalNodeSetParams) \
    X(cuGraphExecExternalSemaphoresWaitNodeSetParams) X(cuGraphExecGetFlags) \
    X(cuGraphExecHostNodeSetParams) X(cuGraphExecKernelNodeSetParams) \
    X(cuGraphExecKernelNodeSetParams_v2) X(cuGraphExecMemcpyNodeSetParams) \
    X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecNodeSetParams) X(cuGraphExecUpdate) \
    X(cuGraphExecUpdate_v2) X(cuGraphExternalSemaphoresSignalNodeGetParams) \
    X(cuGraphExternalSemaphoresSignalNodeSetParams) X(cuGraphExternalSemaphoresWaitNodeGetParams) \
    X(cuGraphExternalSemaphoresWaitNodeSetParams) X(cuGraphGetEdges_v2) X(cuGraphGetNodes) \
    X(cuGraphGetRootNodes) X(cuGraphHostNodeGetParams) X(cuGraphHostNodeSetParams) \
    X(cuGraphInstantiate) X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams) \
    X(cuGraphInstantiateWithParams_ptsz) X(cuGraphKernelNodeCopyAttributes) \
    X(cuGraphKernelNodeGetAttribute) X(cuGraphKernelNodeGetParams) \
    X(cuGraphKernelNodeGetParams_v2) X(cuGraphKernelNodeSetAttribute) \
    X(cuGraphKernelNodeSetParams) X(cuGraphKernelNodeSetParams_v2) X(cuGraphMemAllocNodeGetParams) \
    X(cuGraphMemFreeNodeGetParams) X(cuGraphMemcpyNodeGetParams) X(cuGraphMemcpyNodeSetParams) \
    X(cuGraphMemsetNodeGetParams) X(cuGraphMemsetNodeSetParams) X(cuGraphNodeFindInClone) \
    X(cuGraphNodeGetDependencies_v2) X(cuGraphNodeGetDependentNodes_v2) X(cuGraphNodeGetEnabled) \
    X(cuGraphNodeGetType) X(cuGraphNodeSetEnabled) X(cuGraphNodeSetParams) \
    X(cuGraphReleaseUserObject) X(cuGraphRemoveDependencies_v2) X(cuGraphRetainUserObject) \
    X(cuGraphUpload) X(cuGraphUpload_ptsz) X(cuGraphicsMapResources) \
    X(cuGraphicsMapResources_ptsz) X(cuGraphicsResourceGetMappedMipmappedArray) \
    X(cuGraphicsResourceGetMappedPointer_v2) X(cuGraphicsResourceSetMapFlags_v2) \
    X(cuGraphicsSubResourceGetMappedArray) X(cuGraphicsUnmapResources) \
    X(cuGraphicsUnmapResources_ptsz) X(cuGraphicsUnregisterResource) X(cuGreenCtxCreate) \
    X(cuGreenCtxGetDevResource) X(cuGreenCtxGetId) X(cuGreenCtxRecordEvent) \
    X(cuGreenCtxStreamCreate) X(cuGreenCtxWaitEvent) X(cuImportExternalMemory) \
    X(cuImportExternalSemaphore) X(cuIpcCloseMemHandle) X(cuIpcGetEventHandle) \
    X(cuIpcGetMemHandle) X(cuIpcOpenEventHandle) X(cuIpcOpenMemHandle_v2) X(cuLaunch) \
    X(cuLaunchCooperativeKernelMultiDevice) X(cuLaunchGrid) X(cuLaunchGridAsync) \
    X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz) X(cuLibraryUnload) X(cuLogsCurrent) \
    X(cuLogsDumpToFile) X(cuLogsDumpToMemory) X(cuLogsRegisterCallback) \
    X(cuLogsUnregisterCallback) X(cuMemAddressFree) X(cuMemAddressReserve) X(cuMemAdvise) \
    X(cuMemAdvise_v2) X(cuMemAllocHost) X(cuMemAllocHost_v2) X(cuMemBatchDecompressAsync) \
    X(cuMemBatchDecompressAsync_ptsz) X(cuMemCreate) X(cuMemDiscardAndPrefetchBatchAsync) \
    X(cuMemDiscardAndPrefetchBatchAsync_ptsz) X(cuMemDiscardBatchAsync) \
    X(cuMemDiscardBatchAsync_ptsz) X(cuMemExportToShareableHandle) X(cuMemFreeHost) \
    X(cuMemGetAccess) X(cuMemGetDefaultMemPool) X(cuMemGetHandleForAddressRange) \
    X(cuMemGetMemPool) X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) \
    X(cuMemHostGetDevicePointer_v2) X(cuMemHostGetFlags) X(cuMemHostRegister) \
    X(cuMemHostRegister_v2) X(cuMemHostUnregister) X(cuMemImportFromShareableHandle) \
    X(cuMemMapArrayAsync) X(cuMemMapArrayAsync_ptsz) X(cuMemPoolCreate) X(cuMemPoolDestroy) \
    X(cuMemPoolExportPointer) X(cuMemPoolExportToShareableHandle) X(cuMemPoolGetAccess) \
    X(cuMemPoolImportFromShareableHandle) X(cuMemPoolImportPointer) X(cuMemPoolSetAccess) \
    X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo) X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_ptsz) \
    X(cuMemPrefetchAsync_v2) X(cuMemPrefetchAsync_v2_ptsz) X(cuMemPrefetchBatchAsync) \
    X(cuMemPrefetchBatchAsync_ptsz) X(cuMemRangeGetAttribute) X(cuMemRangeGetAttributes) \
    X(cuMemRelease) X(cuMemRetainAllocationHandle) X(cuMemSetAccess) X(cuMemSetMemPool) \
    X(cuMemcpy) X(cuMemcpy2D) X(cuMemcpy2DAsync) X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz) \
    X(cuMemcpy2DUnaligned) X(cuMemcpy2DUnaligned_v2) X(cuMemcpy2DUnaligned_v2_ptds) \
    X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy3D) X(cuMemcpy3DAsync) X(cuMemcpy3DAsync_v2) \
    X(cuMemcpy3DAsync_v2_ptsz) X(cuMemcpy3DBatchAsync_v2) X(cuMemcpy3DBatchAsync_v2_ptsz) \
    X(cuMemcpy3DPeer) X(cuMemcpy3DPeerAsync) X(cuMemcpy3DPeerAsync_ptsz) X(cuMemcpy3DPeer_ptds) \
    X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyAtoA) \
    X(cuMemcpyAtoA_v2) X(cuMemcpyAtoA_v2_ptds) X(cuMemcpyAtoD) X(cuMemcpyAtoD_v2) \
    X(cuMemcpyAtoD_v2_ptds) X(cuMemcpyAtoH) X(cuMemcpyAtoHAsync_v2) X(cuMemcpyAtoHAsync_v2_ptsz) \
    X(cuMemcpyAtoH_v2) X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyBatchAsync_v2) \
    X(cuMemcpyBatchAsync_v2_ptsz) X(cuMemcpyDtoA) X(cuMemcpyDtoA_v2) X(cuMemcpyDtoA_v2_ptds) \
    X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz) \
    X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoH) X(cuMemcpyDtoHAsync) \
    X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoH_v2) \
    X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyHtoA) X(cuMemcpyHtoAAsync_v2) X(cuMemcpyHtoAAsync_v2_ptsz) \
    X(cuMemcpyHtoA_v2) X(cuMemcpyHtoA_v2_ptds) X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyHtoD_v2) \
    X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyPeer) X(cuMemcpyPeerAsync) X(cuMemcpyPeerAsync_ptsz) \
    X(cuMemcpyPeer_ptds) X(cuMemcpy_ptds) X(cuMemsetD16) X(cuMemsetD16Async) \
    X(cuMemsetD16Async_ptsz) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) X(cuMemsetD2D16) \
    X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) \
    X(cuMemsetD2D32) X(cuMemsetD2D32Async) X(cuMemsetD2D32Async_ptsz) X(cuMemsetD2D32_v2) \
    X(cuMemsetD2D32_v2_ptds) X(cuMemsetD2D8) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz) \
    X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds) X(cuMemsetD32) X(cuMemsetD32Async) \
    X(cuMemsetD32Async_ptsz) X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD8) \
    X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) \
    X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy) X(cuMipmappedArrayGetLevel) \
    X(cuMipmappedArrayGetMemoryRequirements) X(cuMipmappedArrayGetSparseProperties) \
    X(cuModuleUnload) X(cuMulticastAddDevice) X(cuMulticastBindAddr) X(cuMulticastBindMem) \
    X(cuMulticastCreate) X(cuMulticastGetGranularity) X(cuMulticastUnbind) X(cuParamSetSize) \
    X(cuParamSetTexRef) X(cuParamSetf) X(cuParamSeti) X(cuParamSetv) X(cuPointerSetAttribute) \
    X(cuSignalExternalSemaphoresAsync) X(cuSignalExternalSemaphoresAsync_ptsz) \
    X(cuStreamAddCallback) X(cuStreamAddCallback_ptsz) X(cuStreamAttachMemAsync) \
    X(cuStreamAttachMemAsync_ptsz) X(cuStreamBatchMemOp) X(cuStreamBatchMemOp_ptsz) \
    X(cuStreamBatchMemOp_v2) X(cuStreamBatchMemOp_v2_ptsz) X(cuStreamBeginCapture) \
    X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz) \
    X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz) \
    X(cuStreamCopyAttributes) X(cuStreamCopyAttributes_ptsz) X(cuStreamDestroy) \
    X(cuStreamDestroy_v2) X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz) X(cuStreamGetAttribute) \
    X(cuStreamGetAttribute_ptsz) X(cuStreamGetGreenCtx) \
    X(cuStreamQuery) X(cuStreamQuery_ptsz) X(cuStreamSetAttribute) \
    X(cuStreamSetAttribute_ptsz) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) \
    X(cuStreamUpdateCaptureDependencies) X(cuStreamUpdateCaptureDependencies_ptsz) \
    X(cuStreamUpdateCaptureDependencies_v2) X(cuStreamUpdateCaptureDependencies_v2_ptsz) \
    X(cuStreamWaitEvent) X(cuStreamWaitEvent_ptsz) X(cuStreamWaitValue32) \
    X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue32_v2) X(cuStreamWaitValue32_v2_ptsz) \
    X(cuStreamWaitValue64) X(cuStreamWaitValue64_ptsz) X(cuStreamWaitValue64_v2) \
    X(cuStreamWaitValue64_v2_ptsz) X(cuStreamWriteValue32) X(cuStreamWriteValue32_ptsz) \
    X(cuStreamWriteValue32_v2) X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64) \
    X(cuStreamWriteValue64_ptsz) X(cuStreamWriteValue64_v2) X(cuStreamWriteValue64_v2_ptsz) \
    X(cuSurfObjectCreate) X(cuSurfObjectDestroy) X(cuSurfObjectGetResourceDesc) \
    X(cuSurfRefGetArray) X(cuSurfRefSetArray) X(cuTensorMapEncodeIm2col) \
    X(cuTensorMapEncodeIm2colWide) X(cuTensorMapEncodeTiled) X(cuTensorMapReplaceAddress) \
    X(cuTexObjectCreate) X(cuTexObjectDestroy) X(cuTexObjectGetResourceDesc) \
    X(cuTexObjectGetResourceViewDesc) X(cuTexObjectGetTextureDesc) X(cuTexRefCreate) \
    X(cuTexRefDestroy) X(cuTexRefGetAddressMode) X(cuTexRefGetAddress_v2) X(cuTexRefGetArray) \
    X(cuTexRefGetBorderColor) X(cuTexRefGetFilterMode) X(cuTexRefGetFlags) X(cuTexRefGetFormat) \
    X(cuTexRefGetMaxAnisotropy) X(cuTexRefGetMipmapFilterMode) X(cuTexRefGetMipmapLevelBias) \
    X(cuTexRefGetMipmapLevelClamp) X(cuTexRefGetMipmappedArray) X(cuTexRefSetAddress2D_v3) \
    X(cuTexRefSetAddressMode) X(cuTexRefSetAddress_v2) X(cuTexRefSetArray) \
    X(cuTexRefSetBorderColor) X(cuTexRefSetFilterMode) X(cuTexRefSetFlags) X(cuTexRefSetFormat) \
    X(cuTexRefSetMaxAnisotropy) X(cuTexRefSetMipmapFilterMode) X(cuTexRefSetMipmapLevelBias) \
    X(cuTexRefSetMipmapLevelClamp) X(cuTexRefSetMipmappedArray) \
    X(cuUserObjectCreate) X(cuUserObjectRelease) \
    X(cuUserObjectRetain) X(cuWaitExternalSemaphoresAsync) X(cuWaitExternalSemaphoresAsync_ptsz)
#endif
