// rxjs/operators as an ES module for the page (see rxjs.mjs): what
// @ag-ui/client 1.0.0 imports from "rxjs/operators".
const o = globalThis.rxjs.operators;
export const { catchError, concatMap, defaultIfEmpty, filter, finalize, map, mergeAll, mergeMap, switchMap, takeUntil, tap } = o;
export default o;
