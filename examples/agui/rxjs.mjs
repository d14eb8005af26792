// rxjs as an ES module for the page: rxjs's ES builds import their files
// without extensions, which a browser cannot resolve, so the page loads
// rxjs's UMD bundle (a classic script: globalThis.rxjs) and this module
// re-exports what @ag-ui/client 1.0.0 imports from "rxjs".
const r = globalThis.rxjs;
export const { EMPTY, Observable, ReplaySubject, Subject, defer, finalize, from, lastValueFrom, mergeMap, of, pipe, throwError } = r;
export default r;
