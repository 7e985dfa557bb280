/**
 * Open a notebook and bring one graded cell (by its nbgrader grade_id) into view.
 *
 * Only the few members of JupyterLab's Notebook used here are named, so the extension
 * does not depend on the notebook package itself.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { DocumentWidget } from '@jupyterlab/docregistry';

interface ICellLike {
  node: HTMLElement;
  model: { getMetadata(key: string): any };
}

interface INotebookLike {
  widgets: ReadonlyArray<ICellLike>;
  activeCellIndex: number;
  scrollToItem?(index: number, behavior?: string, align?: string): Promise<void>;
}

export function gradeId(cell: ICellLike): string | undefined {
  const meta = cell.model.getMetadata('nbgrader');
  return meta && typeof meta.grade_id === 'string' ? meta.grade_id : undefined;
}

export async function revealExercise(
  app: JupyterFrontEnd,
  path: string,
  exercise: string
): Promise<void> {
  const widget = (await app.commands.execute('docmanager:open', { path })) as DocumentWidget;
  if (!widget) {
    return;
  }
  await widget.context.ready;
  await widget.revealed;
  const notebook = widget.content as unknown as INotebookLike;
  const index = notebook.widgets.findIndex(cell => gradeId(cell) === exercise);
  if (index < 0) {
    return;
  }
  notebook.activeCellIndex = index;
  if (notebook.scrollToItem) {
    await notebook.scrollToItem(index, 'smooth', 'start');
  } else {
    notebook.widgets[index].node.scrollIntoView({ behavior: 'smooth', block: 'start' });
  }
  const node = notebook.widgets[index].node;
  node.classList.add('tc-flash');
  window.setTimeout(() => node.classList.remove('tc-flash'), 1600);
}
